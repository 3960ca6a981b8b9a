"""``drain-guard status`` and ``release`` end to end, and ``run``'s refusals."""

from __future__ import annotations

import base64
import json
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from drain_guard import guards, protocol
from drain_guard.kube.credentials import load_configuration
from drain_guard.kube.kubeclient import ConfigException
from drain_guard_sim.apiserver.server import SimApiServer
from drain_guard_sim.harness.agentproc import AgentProcess
from drain_guard_sim.harness.seedobjects import worker_node
from tests.helpers import (
    CONFIG_A,
    CONFIG_B,
    IMAGE_A,
    IMAGE_B,
    NODE,
    StartAgent,
    add_build_pod,
    mcd_request,
    metric,
    node_annotations,
    run_cli,
    wait_annotation,
)

DRAIN_B = f"drain-{CONFIG_B}"
OPERATOR = "kube:admin"


async def _hold(api: SimApiServer, start_agent: StartAgent) -> AgentProcess:
    add_build_pod(api)
    agent = await start_agent()
    mcd_request(api, DRAIN_B, **{protocol.DESIRED_IMAGE: IMAGE_B})
    await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == "hold-" + DRAIN_B)
    await agent.wait_log(lambda r: r.get("outcome") == "hold")
    return agent


async def test_status_shows_the_hold_and_the_agent(
    api: SimApiServer, start_agent: StartAgent, tmp_path: Path
) -> None:
    add_build_pod(api)
    agent = await start_agent()
    mcd_request(api, DRAIN_B, **{protocol.DESIRED_IMAGE: IMAGE_B})
    await agent.wait_log(lambda r: r.get("outcome") == "hold")
    kubeconfig = str(api.kubeconfig(OPERATOR, tmp_path / "operator"))
    endpoint = f"http://127.0.0.1:{agent.port}"

    code, out, err = await run_cli(
        "status",
        "--node-name",
        NODE,
        "--kubeconfig",
        kubeconfig,
        "-o",
        "json",
        "--endpoint",
        endpoint,
    )
    assert (code, err) == (0, "")
    doc = json.loads(out)
    assert doc["held"] is True
    assert doc["heldRequest"] == DRAIN_B
    assert [r["reason"] for r in doc["holdReasons"]] == ["build-pod"]
    # One hold, one view: the node's hold as the agent's /status says it, key for key.
    hold_keys = ("heldRequest", "since", "expiresAt", "releasesWhen", "pool")
    assert {k: doc[k] for k in hold_keys} == {k: doc["agent"][k] for k in hold_keys}
    assert doc["desiredDrain"] == "hold-" + DRAIN_B
    assert doc["agent"]["node"] == NODE
    assert doc["agent"]["heldRequest"] == DRAIN_B

    code, out, err = await run_cli("status", "--kubeconfig", kubeconfig, env={"NODE_NAME": NODE})
    assert code == 0
    assert f"node {NODE}:" in out
    assert "  held since:    " in out
    assert "build-pod" in out

    # Without --node-name: every node with a hold.
    code, out, _ = await run_cli("status", "--kubeconfig", kubeconfig, "-o", "json")
    assert code == 0
    assert [n["node"] for n in json.loads(out)] == [NODE]


async def test_release_is_manual_and_sticks(
    api: SimApiServer, start_agent: StartAgent, tmp_path: Path
) -> None:
    add_build_pod(api)
    agent = await start_agent()
    mcd_request(api, DRAIN_B, **{protocol.DESIRED_IMAGE: IMAGE_B})
    await agent.wait_log(lambda r: r.get("outcome") == "hold")
    kubeconfig = str(api.kubeconfig(OPERATOR, tmp_path / "operator"))

    code, out, err = await run_cli("release", "--node-name", NODE, "--kubeconfig", kubeconfig)
    assert (code, err) == (0, "")
    assert f"released {DRAIN_B} (outcome manual, released by {OPERATOR})" in out
    # Issue 25: a release while the build runs lets the drain start and stall on the budget.
    assert "it was held for a build pod; if the build still runs, the drain starts now" in out
    ann = node_annotations(api)
    assert ann[protocol.DESIRED_DRAIN] == DRAIN_B
    assert ann[protocol.RELEASED] == DRAIN_B
    # Who released, as the API server knows them (the kubeconfig's user entry is not asked).
    assert ann[protocol.RELEASED_BY] == OPERATOR
    assert api.request_count(user=OPERATOR, resource="selfsubjectreviews") == 1
    assert not any(k in ann for k in protocol.OWNED_KEYS)
    released = [w for w in api.writes("nodes") if w.user == OPERATOR]
    assert len(released) == 1

    # The agent tells the operator's release from a superseding MCD write, and does not hold
    # the released request again although the build pod still runs.
    ended = await agent.wait_log(lambda r: r.get("message") == "hold ended")
    assert ended["outcome"] == "manual"
    assert ended["releasedBy"] == OPERATOR
    await agent.wait_log(lambda r: r.get("request") == DRAIN_B and r.get("outcome") == "pass")
    assert await metric(agent, "drain_guard_releases_total", outcome="manual") == 1
    assert node_annotations(api)[protocol.DESIRED_DRAIN] == DRAIN_B
    # Who released, wherever the agent tells the release: its Event, /status, and status.
    (event,) = await api.wait_for(
        lambda: [e for e in api.list("events", "default") if e["reason"] == "DrainReleased"]
    )
    assert f"(outcome manual, released by {OPERATOR}); held for build-pod: " in event["message"]
    status, body = await agent.http("/status")
    assert status == 200
    assert json.loads(body)["releasedBy"] == OPERATOR
    endpoint = f"http://127.0.0.1:{agent.port}"
    code, out, _ = await run_cli(
        "status", "--node-name", NODE, "--kubeconfig", kubeconfig, "--endpoint", endpoint
    )
    assert code == 0
    assert f"no hold: {DRAIN_B} was released by {OPERATOR} and is not held again" in out
    assert f"{DRAIN_B} was released by {OPERATOR} and is not held again" in out.split("agent:")[1]
    code, out, _ = await run_cli("status", "--kubeconfig", kubeconfig, "-o", "json")
    assert [(n["node"], n["releasedBy"]) for n in json.loads(out)] == [(NODE, OPERATOR)]

    code, out, err = await run_cli("release", "--node-name", NODE, "--kubeconfig", kubeconfig)
    assert code == 1
    assert out == ""
    assert err.count("\n") == 1
    assert "nothing is held" in err


async def test_release_goes_ahead_without_the_releaser_when_the_api_server_does_not_say(
    api: SimApiServer, start_agent: StartAgent, tmp_path: Path
) -> None:
    """A hold must never wait for its record: one warning line, the release, no key."""
    await _hold(api, start_agent)
    api.faults.error(403, message="forbidden", resource="selfsubjectreviews")
    kubeconfig = str(api.kubeconfig(OPERATOR, tmp_path / "operator"))
    code, out, err = await run_cli("release", "--node-name", NODE, "--kubeconfig", kubeconfig)
    assert code == 0
    assert err.count("\n") == 1
    assert err.startswith("drain-guard release: warning: the API server did not say who you are")
    assert err.endswith(f"releasing without {protocol.RELEASED_BY}\n")
    assert f"released {DRAIN_B} (outcome manual)\n" in out
    ann = node_annotations(api)
    assert ann[protocol.RELEASED] == DRAIN_B
    assert protocol.RELEASED_BY not in ann


async def test_a_release_whose_record_admission_refuses_goes_ahead_without_it(
    api: SimApiServer, start_agent: StartAgent, tmp_path: Path
) -> None:
    """Should drain-guard-released-by refuse the name (the API server sees the writer as
    someone else than it said), the record goes, not the release."""
    await _hold(api, start_agent)
    denial = (
        "nodes \"worker-0\" is forbidden: ValidatingAdmissionPolicy 'drain-guard-released-by'"
        " with binding 'drain-guard-released-by' denied request"
    )
    api.faults.error(403, message=denial, user=OPERATOR, verb="patch", resource="nodes", times=1)
    kubeconfig = str(api.kubeconfig(OPERATOR, tmp_path / "operator"))
    code, out, err = await run_cli("release", "--node-name", NODE, "--kubeconfig", kubeconfig)
    assert code == 0, err
    assert err.count("\n") == 1
    assert err.startswith(f"drain-guard release: warning: admission refused {protocol.RELEASED_BY}")
    assert f"released {DRAIN_B} (outcome manual)\n" in out
    ann = node_annotations(api)
    assert ann[protocol.RELEASED] == DRAIN_B
    assert protocol.RELEASED_BY not in ann


async def test_withdrawing_a_hold_request_asks_no_one_who_they_are(
    api: SimApiServer, tmp_path: Path
) -> None:
    """Nothing held: nothing is released, no releaser recorded or asked for."""
    request = guards.format_hold_request(datetime(2099, 1, 1, tzinfo=UTC), "db failover")
    api.patch(
        "nodes",
        NODE,
        {"metadata": {"annotations": {protocol.HOLD_REQUEST: request}}},
        patch_type="merge",
    )
    api.faults.error(403, message="forbidden", resource="selfsubjectreviews")
    kubeconfig = str(api.kubeconfig(OPERATOR, tmp_path / "operator"))
    code, out, err = await run_cli("release", "--node-name", NODE, "--kubeconfig", kubeconfig)
    assert (code, err) == (0, "")
    assert "withdrew the hold request" in out
    assert api.request_count(resource="selfsubjectreviews") == 0


async def test_release_all_with_nothing_held_is_not_an_error(
    api: SimApiServer, tmp_path: Path
) -> None:
    kubeconfig = str(api.kubeconfig(OPERATOR, tmp_path / "operator"))
    code, out, err = await run_cli("release", "--all", "--kubeconfig", kubeconfig)
    assert (code, err) == (0, "")
    assert out == "nothing to release: no node has a hold or stale keys\n"


async def test_status_and_release_agree_on_a_hold_superseded_while_no_agent_ran(
    api: SimApiServer, start_agent: StartAgent, tmp_path: Path
) -> None:
    agent = await _hold(api, start_agent)
    await agent.stop()
    mcd_request(api, f"drain-{CONFIG_B}-2")  # the MCD writes a newer request over the hold
    api.create("nodes", worker_node("worker-1", CONFIG_A, IMAGE_A))
    mcd_request(api, "hold-foreign", name="worker-1")
    kubeconfig = str(api.kubeconfig(OPERATOR, tmp_path / "operator"))

    code, out, err = await run_cli("status", "--kubeconfig", kubeconfig, "-o", "json")
    assert (code, err) == (0, "")
    states = {s["node"]: s for s in json.loads(out)}
    assert states[NODE]["held"] is False
    assert states[NODE]["staleKeys"] == list(protocol.OWNED_KEYS)
    assert states["worker-1"]["held"] is False
    assert "not written by drain-guard" in states["worker-1"]["foreign"]
    code, out, _ = await run_cli("status", "--kubeconfig", kubeconfig, "--node-name", NODE)
    assert "held request" not in out
    assert "stale keys: drain-guard.io/held-drain" in out

    # release --all removes the stale keys and leaves the foreign value alone.
    code, out, err = await run_cli("release", "--all", "--kubeconfig", kubeconfig)
    assert (code, err) == (0, "")
    assert f"node {NODE}: nothing held; removed stale drain-guard.io/held-drain" in out
    ann = node_annotations(api)
    assert not any(k.startswith(protocol.DG_PREFIX) for k in ann)
    assert ann[protocol.DESIRED_DRAIN] == f"drain-{CONFIG_B}-2"
    assert node_annotations(api, "worker-1")[protocol.DESIRED_DRAIN] == "hold-foreign"

    code, out, err = await run_cli("release", "--node-name", "worker-1", "--kubeconfig", kubeconfig)
    assert (code, out) == (1, "")
    assert "not written by drain-guard" in err


async def test_release_all_releases_every_hold(
    api: SimApiServer, start_agent: StartAgent, tmp_path: Path
) -> None:
    await _hold(api, start_agent)
    kubeconfig = str(api.kubeconfig(OPERATOR, tmp_path / "operator"))
    code, out, err = await run_cli("release", "--all", "--kubeconfig", kubeconfig)
    assert (code, err) == (0, "")
    assert f"node {NODE}: released {DRAIN_B}" in out
    assert node_annotations(api)[protocol.DESIRED_DRAIN] == DRAIN_B


@pytest.mark.parametrize(
    ("args", "env", "fragment"),
    [
        (("run",), {}, "--node-name (or NODE_NAME) is required"),
        (("run", "--node-name", "n", "--max-hold", "1h"), {}, "not below 1h"),
        (("run", "--max-hold", "0s"), {"NODE_NAME": "n"}, "greater than 0"),
        (("run", "--node-name", "n"), {"DRAIN_GUARD_LISTEN": "nowhere"}, "HOST:PORT"),
        (("run", "--no-such-flag"), {}, "unrecognized arguments: --no-such-flag"),
        (("release",), {}, "one of the arguments --node-name --all is required"),
        (("status", "-o", "yaml"), {}, "invalid choice: 'yaml'"),
        (("shield", "--build-pod-selector", "!app"), {}, "has no label a pod must have"),
    ],
)
async def test_invalid_settings_exit_2_with_one_line(
    args: tuple[str, ...], env: dict[str, str], fragment: str
) -> None:
    code, out, err = await run_cli(*args, env=env)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith("drain-guard")
    assert fragment in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "args",
    [
        ("status", "--node-name", NODE),
        ("release", "--all"),
        ("run", "--node-name", NODE, "--listen", "127.0.0.1:0"),
    ],
)
async def test_a_missing_kubeconfig_is_one_line_exit_2(
    args: tuple[str, ...], tmp_path: Path
) -> None:
    missing = str(tmp_path / "nope")
    code, out, err = await run_cli(*args, "--kubeconfig", missing)
    assert (code, out) == (2, "")
    assert err.count("\n") == 1
    assert f"cannot load Kubernetes config: kubeconfig {missing} not found" in err


async def test_no_writable_temporary_directory_is_said_so_not_malformed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 27: the library writes inline certificate data to a temporary file; with none
    writable the agent said the kubeconfig "is malformed"."""
    ca = base64.b64encode(b"-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n")
    cluster = {"server": "https://127.0.0.1:6443", "certificate-authority-data": ca.decode()}
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "c",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "no-such-dir"))
    with pytest.raises(ConfigException) as info:
        await load_configuration(str(path))
    message = str(info.value)
    assert "cannot write its inline certificate data to a temporary file" in message
    assert "writable temporary directory" in message
    assert "malformed" not in message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("apiVersion: v1\nclusters: [\n  - : x\n", "ParserError"),
        ("apiVersion: v1\nclusters: 5\ncontexts: 7\ncurrent-context: 3\n", "TypeError"),
        ("just a string\n", "TypeError"),
    ],
)
@pytest.mark.parametrize(
    "args",
    [("status", "--node-name", NODE), ("run", "--node-name", NODE, "--listen", "127.0.0.1:0")],
)
async def test_a_malformed_kubeconfig_is_one_line_exit_2(
    args: tuple[str, ...], text: str, fragment: str, tmp_path: Path
) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(text)
    code, out, err = await run_cli(*args, "--kubeconfig", str(path))
    assert (code, out) == (2, "")
    assert err.count("\n") == 1
    assert f"kubeconfig {path} is malformed: {fragment}" in err


async def test_status_warns_about_an_endpoint_of_another_nodes_agent(
    api: SimApiServer, start_agent: StartAgent, tmp_path: Path
) -> None:
    agent = await start_agent()
    api.create("nodes", worker_node("worker-1", CONFIG_A, IMAGE_A))
    kubeconfig = str(api.kubeconfig(OPERATOR, tmp_path / "operator"))
    endpoint = f"http://127.0.0.1:{agent.port}"
    code, out, err = await run_cli(
        "status", "--node-name", "worker-1", "--kubeconfig", kubeconfig, "--endpoint", endpoint
    )
    assert code == 0
    warning = f"{endpoint} is the agent of node {NODE}, not of worker-1"
    assert err == f"drain-guard status: warning: {warning}\n"
    assert f"WARNING: {warning}" in out


async def test_hold_writes_a_valid_request_that_release_withdraws(
    api: SimApiServer, start_agent: StartAgent, tmp_path: Path
) -> None:
    """Issue 25: drain-guard hold beside release, round-tripping."""
    agent = await start_agent()
    kubeconfig = str(api.kubeconfig(OPERATOR, tmp_path / "operator"))
    code, out, err = await run_cli(
        "hold",
        "--node-name",
        NODE,
        "--for",
        "2h",
        "--reason",
        "db failover",
        "--kubeconfig",
        kubeconfig,
    )
    assert (code, err) == (0, "")
    assert "drains held until " in out
    assert "note: each drain is held at most the agent's --max-hold (below 1h" in out
    value = node_annotations(api)[protocol.HOLD_REQUEST]
    until, reason = guards.parse_hold_request(value)
    assert reason == "db failover"

    # The agent reads it as valid: it holds the next drain request for it (only for it: the
    # update is to a new image).
    mcd_request(api, DRAIN_B, **{protocol.DESIRED_IMAGE: IMAGE_B})
    await wait_annotation(api, protocol.DESIRED_DRAIN, lambda v: v == "hold-" + DRAIN_B)
    assert node_annotations(api)[protocol.HOLD_REASONS] == "manual"
    code, out, _ = await run_cli("status", "--node-name", NODE, "--kubeconfig", kubeconfig)
    assert code == 0
    assert (
        f"released:      manual: when the hold request expires at {protocol.format_rfc3339(until)}"
        in out
    )
    assert "capped by --max-hold" in out

    code, out, err = await run_cli("release", "--node-name", NODE, "--kubeconfig", kubeconfig)
    assert (code, err) == (0, "")
    assert f"released {DRAIN_B} (outcome manual, released by {OPERATOR})" in out
    assert f"withdrew the hold request '{value}'" in out
    ann = node_annotations(api)
    assert protocol.HOLD_REQUEST not in ann
    assert ann[protocol.DESIRED_DRAIN] == DRAIN_B
    await agent.wait_log(lambda r: r.get("message") == "hold ended")


async def test_release_withdraws_a_hold_request_with_nothing_held(
    api: SimApiServer, tmp_path: Path
) -> None:
    kubeconfig = str(api.kubeconfig(OPERATOR, tmp_path / "operator"))
    code, _, err = await run_cli(
        "hold", "--node-name", NODE, "--for", "30m", "--reason", "x", "--kubeconfig", kubeconfig
    )
    assert (code, err) == (0, "")
    code, out, err = await run_cli("release", "--all", "--kubeconfig", kubeconfig)
    assert (code, err) == (0, "")
    assert "withdrew the hold request" in out
    assert protocol.HOLD_REQUEST not in node_annotations(api)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--for", "0s", "--reason", "x"), "drain-guard hold: error: --for must be above 0"),
        (("--for", "30m", "--reason", "a\nb"), "control character"),
        (("--for", "30m", "--reason", "  "), "the reason is empty"),
        (("--for", "soon", "--reason", "x"), "argument --for: "),
    ],
)
async def test_hold_refuses_bad_input_in_one_line(
    api: SimApiServer, tmp_path: Path, flags: tuple[str, ...], message: str
) -> None:
    kubeconfig = str(api.kubeconfig(OPERATOR, tmp_path / "operator"))
    code, out, err = await run_cli("hold", "--node-name", NODE, *flags, "--kubeconfig", kubeconfig)
    assert (code, out) == (2, "")
    assert err.count("\n") == 1
    assert message in err
    assert protocol.HOLD_REQUEST not in node_annotations(api)


async def test_kubectls_kubeconfig_list_is_merged_and_an_empty_one_is_one_line(
    api: SimApiServer, tmp_path: Path
) -> None:
    """Issue 25: KUBECONFIG=a:b was read as one file name; an empty file was a TypeError."""
    kubeconfig = str(api.kubeconfig(OPERATOR, tmp_path / "operator"))
    listed = f"{tmp_path / 'absent'}:{kubeconfig}"
    code, out, err = await run_cli("status", env={"KUBECONFIG": listed})
    assert (code, err) == (0, "")
    assert out.startswith("no node has a hold")
    empty = tmp_path / "empty"
    empty.write_text("")
    code, out, err = await run_cli("status", "--kubeconfig", str(empty))
    assert (code, out) == (2, "")
    assert (
        err
        == f"drain-guard status: error: cannot load Kubernetes config: kubeconfig {empty}"
        + (" is empty\n")
    )


async def test_a_missing_host_root_is_one_line_exit_2(tmp_path: Path) -> None:
    code, out, err = await run_cli(
        "run", "--node-name", NODE, "--host-root", str(tmp_path / "nonexistent")
    )
    assert (code, out) == (2, "")
    assert err == (
        f"drain-guard run: error: --host-root {tmp_path / 'nonexistent'}: no such directory"
        " (where the host's / is mounted)\n"
    )
