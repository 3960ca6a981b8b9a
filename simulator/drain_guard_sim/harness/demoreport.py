"""What the demo prints of a run: its timeline (the key lines, in MCO seconds) and the verdict
of the runs without and with drain-guard."""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from typing import TextIO

from drain_guard_sim.actors.mco import McoVersion
from drain_guard_sim.actors.timeline import Timeline, TimelineEntry
from drain_guard_sim.harness.demoagents import AGENT_ACTOR, HOLDING
from drain_guard_sim.harness.outcome import Cordon, Outcome

# Timeline lines worth showing a newcomer (actor, text); the full timeline has every step.
KEY_LINES = (
    ("user", ""),
    ("node-controller", "Setting node"),
    ("machine-config-daemon", "Starting transition"),
    ("machine-config-daemon", "Update prepared"),
    ("machine-config-daemon", "drain is already completed"),
    ("machine-config-daemon", "Image pullspecs equal"),
    ("machine-config-daemon", "Updating OS to layered image"),
    ("machine-config-daemon", "Marking Degraded"),
    ("machine-config-daemon", "Already in desired image"),
    ("node-controller", "Requeueing layered pool"),
    ("node", "rebooted into"),
    ("machine-config-controller", "cordon succeeded"),
    ("machine-config-controller", "evicting pod openshift-machine-config-operator/"),
    ("machine-config-controller", "evicting pod openshift-image-registry/"),
    ("machine-config-controller", "non-recognized drain verb"),
    ("build-controller", ""),
    ("demo", ""),
    ("machine-os-builder", "Build succeeded"),
    (AGENT_ACTOR, ""),
)


@dataclass
class RunResult:
    title: str
    outcome: Outcome
    timeline: Timeline
    time_factor: float
    initial_image: str
    holds: dict[str, set[str]] | None
    rollout_done: bool
    start: float  # timeline seconds when the MachineConfig was created
    gave_up: bool = False
    #: MCO 4.16+'s story: whether the control-plane pool finished its own rollout.
    masters_done: bool = False
    #: MCO 4.16+'s story: when the worker MachineConfig was deleted (timeline seconds; None:
    #: not reached), and whether the pool was back on the config before it.
    revert_start: float | None = None
    revert_done: bool = False


def _short(text: str) -> str:
    """Shorter registry paths, digests and rendered-config hashes, for 100-column terminals."""
    text = text.replace(
        "image-registry.openshift-image-registry.svc:5000/openshift-machine-config-operator/", ""
    )
    text = re.sub(r"sha256:([0-9a-f]{12})[0-9a-f]{52}", r"sha256:\1…", text)
    return re.sub(r"(rendered-[a-z0-9-]+?-[0-9a-f]{8})[0-9a-f]{24}", r"\1…", text)


def _key(entry: TimelineEntry) -> bool:
    return any(entry.actor == a and t in entry.message for a, t in KEY_LINES)


def print_timeline(result: RunResult, mode: str, out: TextIO) -> None:
    """The run's timeline from the MachineConfig's creation, repeated lines folded."""
    if mode == "none":
        return
    entries = [e for e in result.timeline.entries if mode == "full" or _key(e)]
    t0 = result.start
    out.write(f"\n== Timeline {result.title} (MCO seconds since the MachineConfig) ==\n")
    shown: list[tuple[TimelineEntry, int]] = []
    for entry in entries:
        if entry.t < t0 and mode != "full":
            continue
        last = shown[-1][0] if shown else None
        if last is not None and (last.actor, last.node, last.message) == (
            entry.actor,
            entry.node,
            entry.message,
        ):
            shown[-1] = (last, shown[-1][1] + 1)
        else:
            shown.append((entry, 1))
    for entry, count in shown:
        moved = TimelineEntry(entry.t - t0, entry.actor, entry.node, entry.message)
        repeat = f"  (x{count})" if count > 1 else ""
        out.write(_short(moved.format(result.time_factor)) + repeat + "\n")
    if result.gave_up and mode != "full":
        out.write("\n(the run did not finish; its last steps:)\n")
        for entry in result.timeline.entries[-30:]:
            moved = TimelineEntry(entry.t - t0, entry.actor, entry.node, entry.message)
            out.write(_short(moved.format(result.time_factor)) + "\n")


def _digest(image: str) -> str:
    return image.rpartition("@")[2][:19]


def _cordon_text(c: Cordon, result: RunResult) -> str:
    at = (c.t - result.start) / result.time_factor
    plan = ""
    if c.update is not None:
        kind = "same image" if c.update.same_image else "new image"
        plan = (
            f"; the MCD's update: {_digest(c.update.from_image)} -> "
            f"{_digest(c.update.to_image)} ({kind})"
        )
    return f"{c.node} at {at:.0f}s{plan}"


def verdict(without: RunResult, with_: RunResult) -> tuple[list[tuple[str, str, str]], bool]:
    """The rows of the verdict table and whether the run with agents met every goal."""

    def during(r: RunResult) -> str:
        cs = r.outcome.during_build()
        return str(len(cs)) + (f" ({', '.join(c.node for c in cs)})" if cs else "")

    def build(r: RunResult) -> str:
        b = r.outcome.build
        if b is None:
            return "none"
        reason = f" ({b.reason})" if b.reason else ""
        return f"{b.phase}{reason} on {b.node}"

    def unchanged(r: RunResult) -> str:
        return str(len(r.outcome.unchanged_image_cordons()))

    def holds(r: RunResult) -> str:
        if r.holds is None:
            return "-"
        if not r.holds:
            return "none"
        return "; ".join(f"{n}: {', '.join(sorted(rs))}" for n, rs in sorted(r.holds.items()))

    def after(r: RunResult) -> str:
        cs = r.outcome.after_build()
        return str(len(cs)) + (f" ({', '.join(c.node for c in cs)})" if cs else "")

    def rollout(r: RunResult) -> str:
        return "complete" if r.rollout_done else "stopped (build failed)"

    rows = [
        ("drains (cordons) during the build", during(without), during(with_)),
        ("build outcome", build(without), build(with_)),
        ("drains while desired image = booted", unchanged(without), unchanged(with_)),
        ("holds (reasons)", holds(without), holds(with_)),
        ("drains after the build", after(without), after(with_)),
        ("rollout of the new image", rollout(without), rollout(with_)),
    ]
    b = with_.outcome.build
    ok = (
        b is not None
        and b.succeeded
        and not with_.outcome.during_build()
        and not with_.outcome.unchanged_image_cordons()
        and with_.rollout_done
    )
    return rows, ok


def plane_verdict(without: RunResult, with_: RunResult) -> tuple[list[tuple[str, str, str]], bool]:
    """MCO 4.16+'s story: the rows of the verdict table and whether the run with agents met
    every goal (no build pod evicted, the build succeeded, both pools rolled out)."""

    def evicted(r: RunResult) -> str:
        pods = r.outcome.build_pods_evicted()
        return str(len(pods)) + (
            f" ({', '.join(p.rpartition('/')[2] for p in pods)})" if pods else ""
        )

    def build(r: RunResult) -> str:
        b = r.outcome.build
        if b is None:
            return "none"
        reason = f" ({b.reason})" if b.reason else ""
        took = (b.finished - b.started) / r.time_factor
        return f"{b.phase}{reason} after {took:.0f}s"

    def holds(r: RunResult) -> str:
        if r.holds is None:
            return "-"
        if not r.holds:
            return "none (nothing needed holding)"
        return "; ".join(f"{n}: {', '.join(sorted(rs))}" for n, rs in sorted(r.holds.items()))

    def during(r: RunResult) -> str:
        cs = r.outcome.during_build()
        return str(len(cs)) + (f" ({', '.join(c.node for c in cs)})" if cs else "")

    def done(flag: bool) -> str:
        return "complete" if flag else "not complete"

    def revert_drains(r: RunResult) -> str:
        if r.revert_start is None:
            return "-"
        cs = [c for c in r.outcome.unchanged_image_cordons() if c.t >= r.revert_start]
        return str(len(cs)) + (f" ({', '.join(c.node for c in cs)})" if cs else "")

    def revert_holds(r: RunResult) -> str:
        if r.holds is None or r.revert_start is None:
            return "-"
        held = revert_held(r)
        return ", ".join(held) if held else "none: let through at once"

    rows = [
        ("build pods evicted", evicted(without), evicted(with_)),
        ("build outcome", build(without), build(with_)),
        ("drains (cordons) during the build", during(without), during(with_)),
        ("holds (reasons)", holds(without), holds(with_)),
        ("control-plane pool's rollout", done(without.masters_done), done(with_.masters_done)),
        ("worker pool's rollout (new image)", done(without.rollout_done), done(with_.rollout_done)),
        ("revert: drains for the booted image", revert_drains(without), revert_drains(with_)),
        ("revert: drains held", revert_holds(without), revert_holds(with_)),
        ("revert: pool back on its config", done(without.revert_done), done(with_.revert_done)),
    ]
    b = with_.outcome.build
    ok = (
        b is not None
        and b.succeeded
        and not with_.outcome.build_pods_evicted()
        and with_.masters_done
        and with_.rollout_done
        and with_.revert_done
        and not revert_held(with_)
    )
    return rows, ok


def revert_held(r: RunResult) -> list[str]:
    """The nodes whose agent held a drain after the revert began."""
    if r.revert_start is None:
        return []
    start = r.revert_start
    return sorted(
        {
            e.node or ""
            for e in r.timeline.entries
            if e.actor == AGENT_ACTOR and e.t >= start and e.message.startswith(tuple(HOLDING))
        }
    )


def revert_decisions(r: RunResult) -> list[str]:
    """Each agent's first decision after the revert began that was not idle."""
    if r.revert_start is None:
        return []
    seen: dict[str, str] = {}
    for e in r.timeline.entries:
        if e.actor == AGENT_ACTOR and e.t >= r.revert_start and e.node and e.node not in seen:
            seen[e.node] = f"{e.node}: {e.message}"
    return [seen[n] for n in sorted(seen)]


EXPLAINED_PLANE = (
    "MCO {v} waits for the build before it targets any worker, so the worker pool drains"
    " nothing during the build. But MCO's build pods tolerate the control-plane taint, and the"
    " control-plane pool rolls out on its own: its drain of the node that runs the build evicts"
    " the build pod{lost}. drain-guard held that one drain (build-pod) while the build ran,"
    " then let it go: the control-plane node drained once, after the build, and the worker pool"
    " rolled the new image out.{builder}"
)


EXPLAINED_4_15 = (
    "  MCO 4.15's daemon fixes its target image when an update starts. The update begun\n"
    "  during the build (same image) was held by drain-guard while its drain was harmful\n"
    "  (the build pod ran) and pointless (no new image existed). Its drain once released\n"
    "  (the same image, listed above) is fine: the build was over, so it evicted no build,\n"
    "  and the node's desired image was the new one by then, so it is the one drain the\n"
    '  node needed for it. The daemon rebooted without a rebase ("Image pullspecs equal"),\n'
    '  then started the real update, whose drain was already done ("drain is already\n'
    '  completed on this node"), and rebased into the new image: one drain for the node, as\n'
    "  for every other. Holding longer would only have delayed that same drain: the daemon\n"
    "  keeps the target it fixed until the update ends. The other nodes then updated one\n"
    "  at a time, each with one drain for a real image change.\n"
)


def print_verdict(
    without: RunResult, with_: RunResult, out: TextIO, version: McoVersion = McoVersion.V4_15
) -> bool:
    if version is not McoVersion.V4_15:
        return _print_plane_verdict(without, with_, out, version)
    rows, ok = verdict(without, with_)
    head = ("", without.title, with_.title)
    widths = [max(len(r[i]) for r in (*rows, head)) for i in range(3)]
    out.write("\n== Verdict ==\n")
    for row in (head, *rows):
        out.write(
            "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() + "\n"
        )
    out.write("\nDrains after the build, explained:\n")
    for c in with_.outcome.after_build():
        out.write(f"  - {_cordon_text(c, with_)}\n")
    out.write(EXPLAINED_4_15)
    out.write(
        "\nPASS: no drain during the build, the build succeeded, no drain while the desired image\n"
        "was the booted one.\n"
        if ok
        else "\nFAIL: see the verdict above.\n"
    )
    return ok


def _table(rows: list[tuple[str, str, str]], head: tuple[str, str, str], out: TextIO) -> None:
    widths = [max(len(r[i]) for r in (*rows, head)) for i in range(3)]
    out.write("\n== Verdict ==\n")
    for row in (head, *rows):
        out.write(
            "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() + "\n"
        )


def _print_plane_verdict(
    without: RunResult, with_: RunResult, out: TextIO, version: McoVersion
) -> bool:
    rows, ok = plane_verdict(without, with_)
    _table(rows, ("", without.title, with_.title), out)
    if version.job_builds:
        lost = (
            " (a Job: its pod is replaced and the build starts over, its first minutes lost;"
            " a fourth lost pod fails it), and with it machine-os-builder, whose drain during a"
            " build makes 4.18/4.19 build again and degrade the pool (OCPBUGS-58238, not played"
            " by the simulator)"
        )
        builder = (
            " With no build pod there, the agent would still hold the drain of the node that runs"
            " machine-os-builder while a MachineOSBuild is in flight."
        )
    else:
        lost, builder = " and the build fails: the worker pool's update stops", ""
    text = EXPLAINED_PLANE.format(v=version.value, lost=lost, builder=builder)
    wrapped = textwrap.fill(
        text, width=88, initial_indent="  ", subsequent_indent="  ", break_on_hyphens=False
    )
    out.write("\nExplained:\n" + wrapped + "\n")
    if version.job_builds:
        revert = (
            "The revert: MCO {v} reuses the old MachineOSBuild and names its image, so every"
            " worker's drain was for a real update: nothing needed holding."
        )
    else:
        revert = (
            "The revert: MCO {v} starts no build for a config it built before and sends every"
            " worker that config with the image it runs (D1): a drain and a reboot that no build"
            " will replace. drain-guard reads the pool's MachineOSBuild and MachineOSConfig,"
            " sees nothing coming, and lets each such drain through at once rather than hold it"
            " to --max-hold."
        )
    out.write(textwrap.fill(revert.format(v=version.value), width=88, initial_indent="  ",
                            subsequent_indent="  ", break_on_hyphens=False) + "\n")  # fmt: skip
    for line in revert_decisions(with_):
        out.write(f"    {_short(line)}\n")
    if with_.holds == {}:
        out.write("\nNothing needed holding in this run.\n")
    out.write(
        "\nPASS: no build pod evicted, the build succeeded, both pools rolled out, no drain"
        " held in the revert.\n"
        if ok
        else "\nFAIL: see the verdict above.\n"
    )
    return ok


def times_note(api: str, time_factor: float) -> str:
    """What the timelines' seconds are: MCO's, the run's scaled back up; on the real API
    server its own delays are scaled up with them, which a reader would not guess."""
    speed = f"{1 / time_factor:g}"
    note = (
        f"Times are MCO seconds: every MCO duration is played {speed}x faster (--time-factor"
        f" {time_factor:g}), and the timelines scale the run's clock back up"
    )
    if api == "real":
        note += f", so the real API server's own delays show {speed}x longer than they took"
    return textwrap.fill(note + ".", width=86) + "\n"
