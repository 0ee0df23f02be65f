"""Does this machine share device memory between processes (the judge's regions)? One region made
in this process, mapped in a child, written there, read back here."""
import subprocess
import sys

import torch

from harness.regions import Region, RegionHandle


def child(kind: str, nbytes: int, handle: str) -> None:
    device = torch.device("cuda", 0) if kind == "cuda" else torch.device("cpu")
    region = Region.open(RegionHandle(kind, nbytes, handle), device)
    region.tensor[:16].fill_(7)
    if device.type == "cuda":
        torch.cuda.synchronize()
    print("child wrote", int(region.tensor[:16].sum()))


if __name__ == "__main__":
    if len(sys.argv) > 1:
        child(sys.argv[1], int(sys.argv[2]), sys.argv[3])
        sys.exit(0)
    for kind in (["cuda"] if torch.cuda.is_available() else []) + ["cpu"]:
        device = torch.device("cuda", 0) if kind == "cuda" else torch.device("cpu")
        region = Region.allocate(1 << 20, device)
        region.tensor.zero_()
        done = subprocess.run([sys.executable, __file__, kind, str(region.nbytes), region.handle.handle], capture_output=True, text=True)
        print(kind, "child exit", done.returncode, done.stdout.strip(), done.stderr.strip()[-300:])
        print(kind, "parent reads", int(region.tensor[:16].sum()), "(112 expected)")
        region.free()
