"""Code that runs a model on a device, in the trusted judge and in the untrusted worker alike: the
CUDA driver calls, the shared memory regions, builds, timing, CUDA graphs, the profiler, and the
helpers both sides run model code with (loading, inputs, gradients, one side of a paired timing).
Imports only harness.core."""
