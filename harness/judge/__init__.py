"""The trusted judge process (`python -m harness.judge.service`): it runs the problem's reference,
stages every compared worker's inputs, and decides correctness on outputs where they lie. Also the
lint's own process (`python -m harness.judge.lint`), which checks a reference the same way. Imports
harness.core and harness.device, never harness.worker."""
