"""Views of stored records, in the parent: leaderboards, the regression gate, KernelBench's timing
baselines, charts, progress, and text made safe to show. Imports harness.core and harness.sources,
never a device or a process."""
