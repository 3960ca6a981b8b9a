"""Hold reaction of several agent variants, interleaved in one run: ratios that hold under load.

Separate runs of ``benchmarks.reaction`` meet different load on a shared machine, so their
difference mixes the variants with the load. Here one simulator serves one agent process per
``--agent``, each on its own node; after ``--warmup`` holds each, ``--rounds`` rounds give every
agent ``--block`` reaction cycles (``benchmarks.reaction.cycle``) in turn, the order rotated per
round, so that the variants meet the same load. Reported per agent: the pooled summary, and
the median over the rounds of its block's median and p90 divided by the first agent's in the
same round (the ratio), and the p99 of its first and its later holds (whether the tail grows
with the holds an agent has made).

An agent is ``LABEL=VARIANT[,-NAME][,+NAME=VALUE]...``: a ``benchmarks.deployed`` variant with
environment variables taken away or added (the defaults compare the image's ``ENV`` item by
item); ``--baseline REF`` adds git revision REF's deployed agent (the previous release).
``python -m benchmarks.interleave [--rounds 25] [--block 20] [--agent ...] [--baseline REF]``
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from benchmarks import deployed
from benchmarks.common import (
    percentile,
    seconds_to_ready,
    seed_api,
    start_agent,
    stop_agent,
    summary_ms,
    write_result,
)
from benchmarks.reaction import Mcd, cycle
from drain_guard_sim.apiserver.server import SimApiServer

DEFAULT_AGENTS = (
    "deployed=deployed",
    "development=development",
    "deployed-no-malloc-env=deployed,-MALLOC_MMAP_THRESHOLD_",
    "deployed-unoptimised=deployed-unoptimised",
    "development-malloc-env=development,+MALLOC_MMAP_THRESHOLD_=131072",
)


def parse_agent(spec: str, tree: Path | None) -> tuple[str, deployed.Agent]:
    """``LABEL=VARIANT[,-NAME][,+NAME=VALUE]...`` → the label and how to start that agent."""
    label, _, rest = spec.partition("=")
    variant, *edits = rest.split(",")
    if not label or variant not in deployed.VARIANTS:
        raise ValueError(f"agent {spec!r}: want LABEL=VARIANT[,-NAME][,+NAME=VALUE]...")
    how = deployed.agent(variant, tree)
    env = dict(how.env)
    for edit in edits:
        if edit.startswith("-"):
            env.pop(edit[1:], None)
        elif edit.startswith("+") and "=" in edit:
            name, _, value = edit[1:].partition("=")
            env[name] = value
        else:
            raise ValueError(f"agent {spec!r}: edit {edit!r} is neither -NAME nor +NAME=VALUE")
    return label, replace(how, variant=label, env=env)


async def measure(
    agents: dict[str, deployed.Agent], rounds: int, block: int, warmup: int, workdir: Path
) -> dict[str, list[float]]:
    """Reactions in seconds per label, in the order each agent made them."""
    labels = list(agents)
    nodes = {label: f"worker-{i}" for i, label in enumerate(labels)}
    samples: dict[str, list[float]] = {label: [] for label in labels}
    async with SimApiServer() as api:
        seed_api(api, list(nodes.values()))
        procs = {
            label: await start_agent(api, nodes[label], workdir / label, agent=how)
            for label, how in agents.items()
        }
        mcd = Mcd(api)
        i = 0
        try:
            for proc in procs.values():
                await seconds_to_ready(proc)
            for label in labels:
                for _ in range(warmup):
                    await cycle(api, mcd, nodes[label], i)
                    i += 1
            for r in range(rounds):
                for label in labels[r % len(labels) :] + labels[: r % len(labels)]:
                    for _ in range(block):
                        samples[label].append(await cycle(api, mcd, nodes[label], i))
                        i += 1
        finally:
            await mcd.close()
            for proc in procs.values():
                await stop_agent(proc)
    return samples


def compare(samples: dict[str, list[float]], block: int) -> dict[str, Any]:
    """Per label: the pooled summary, the per-round ratios to the first label, early/late p99."""
    labels = list(samples)
    ref = samples[labels[0]]
    rounds = len(ref) // block
    out: dict[str, Any] = {}
    for label in labels:
        mine = samples[label]
        blocks = [
            (mine[r * block : (r + 1) * block], ref[r * block : (r + 1) * block])
            for r in range(rounds)
        ]
        median_ratios = [statistics.median(a) / statistics.median(b) for a, b in blocks]
        p90_ratios = [percentile(a, 90) / percentile(b, 90) for a, b in blocks]
        half = len(mine) // 2
        out[label] = {
            **summary_ms(mine),
            "ratio_of_round_medians": round(statistics.median(median_ratios), 3),
            "ratio_of_round_medians_iqr": [
                round(percentile(median_ratios, 25), 3),
                round(percentile(median_ratios, 75), 3),
            ],
            "ratio_of_round_p90s": round(statistics.median(p90_ratios), 3),
            "first_half_p99_ms": summary_ms(mine[:half])["p99_ms"],
            "second_half_p99_ms": summary_ms(mine[half:])["p99_ms"],
        }
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        allow_abbrev=False, prog="python -m benchmarks.interleave", description=__doc__
    )
    p.add_argument("--agent", action="append", default=None, metavar="LABEL=VARIANT[,EDIT]")
    p.add_argument("--rounds", type=int, default=25)
    p.add_argument("--block", type=int, default=20)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--baseline", default=None, help="a git revision's deployed agent as well")
    p.add_argument("--out", type=Path, default=None, help="results directory")
    a = p.parse_args(argv)
    specs = a.agent or list(DEFAULT_AGENTS)
    with tempfile.TemporaryDirectory(prefix="bench-interleave-") as tmp:
        variants = [spec.partition("=")[2].split(",")[0] for spec in specs]
        tree = deployed.tree_for(variants, Path(tmp))
        agents = dict(parse_agent(spec, tree) for spec in specs)
        if a.baseline is not None:
            base = deployed.baseline(a.baseline, Path(tmp))
            agents[f"baseline {a.baseline}"] = replace(base, variant=f"baseline {a.baseline}")
        samples = asyncio.run(measure(agents, a.rounds, a.block, a.warmup, Path(tmp)))
    result = {
        "params": {
            "agents": specs,
            "baseline": a.baseline,
            "rounds": a.rounds,
            "block": a.block,
            "warmup": a.warmup,
        },
        "agents": compare(samples, a.block),
    }
    for label, figures in result["agents"].items():
        print(label, figures, flush=True)
    print(f"wrote {write_result('interleave', result, a.out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
