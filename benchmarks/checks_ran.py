"""Did every check run? From a corpus state file (benchmarks/kbcorpus.py --state): how many kernels
that build an extension found it built ahead, how each build ahead ended, how compute-sanitizer's
runs ended, and which kernels got `harness error`.

    python3 benchmarks/checks_ran.py STATE.jsonl [--profile loop]
"""

from __future__ import annotations

import argparse
import collections
import json
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("state", type=Path)
    parser.add_argument("--profile", default="")
    args = parser.parse_args()
    lines = [json.loads(line) for line in args.state.read_text().splitlines() if line.strip()]
    lines = [line for line in lines if not args.profile or line.get("profile") == args.profile]
    statuses = collections.Counter(line.get("status") for line in lines)
    building = [line for line in lines if line.get("builds")]
    ahead = [line for line in building if all(cached for _, cached in line["builds"])]
    outcomes = collections.Counter((line.get("ahead") or {}).get("outcome") for line in lines)
    sanitizer = collections.Counter(f"{tool}:{outcome}" for line in lines for tool, outcome, *_ in line.get("sanitizer") or [])
    print(f"kernels with a line: {len(lines)}; statuses: {dict(statuses)}")
    share = f"{len(ahead) / len(building):.0%}" if building else "n/a"
    print(f"built an extension: {len(building)}; every build found finished in the lane (built ahead): {len(ahead)} ({share})")
    for line in building:
        if line not in ahead:
            print(f"  compiled in the lane: {line['kernel']}: ahead {line.get('ahead')}; builds {line['builds']}")
    print(f"build ahead outcomes: {dict(outcomes)}")
    print(f"sanitizer runs: {dict(sanitizer)}")
    for line in lines:
        for tool, outcome, detail, *_ in line.get("sanitizer") or []:
            if outcome not in ("clean", "errors"):
                print(f"  {tool} {outcome} on {line['kernel']}: {detail}")
    for line in lines:
        if line.get("status") in ("harness error", "no record"):
            print(f"{line.get('status')}: {line['kernel']}: {line.get('reason')}")


if __name__ == "__main__":
    main()
