"""Can this machine's driver share device memory between processes (CUDA IPC)? Where it cannot
(some GPU sandboxes), the lane judge shares host memory instead (`data_plane: host` in records).

    PYTHONPATH=. python3 benchmarks/ipc_probe.py
"""
import torch

from harness.device.regions import device_sharing

if __name__ == "__main__":
    if not torch.cuda.is_available():
        print("no CUDA device")
    else:
        torch.zeros(1, device="cuda")  # the context the probe's region is made in
        print("CUDA IPC:", "yes (data_plane: cuda)" if device_sharing() else "no (data_plane: host)")
