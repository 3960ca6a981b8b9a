"""The host reader: cmdline, origin and rpm-ostree parsing; host trees built in tmp_path."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drain_guard.guards import BootedImage
from drain_guard.node.host import (
    HostError,
    parse_cmdline,
    parse_origin,
    parse_rpm_ostree_status,
    read_booted_image,
    read_booted_image_rpm_ostree,
    resolve_inside,
)

DIGEST = "sha256:6498f333a29f6d3943e852b039e77d894e47ee29b0212af38cf120ca7c4b85ce"
IMAGE = "image-registry.openshift-image-registry.svc:5000/openshift-machine-config-operator/ocb"
REFERENCE = f"ostree-unverified-registry:{IMAGE}@{DIGEST}"
CHECKSUM = "a" * 64
BOOTCSUM = "b" * 64
BOOT_ARG = f"/ostree/boot.1/rhcos/{BOOTCSUM}/0"


# --- pure parsing -------------------------------------------------------------------------


def test_parse_cmdline() -> None:
    text = (
        f"BOOT_IMAGE=(hd0,gpt3)/ostree/rhcos-x/vmlinuz rw ostree={BOOT_ARG} "
        "ignition.platform.id=aws\n"
    )
    assert parse_cmdline(text) == BOOT_ARG


def test_parse_cmdline_last_ostree_wins_and_quotes_are_dropped() -> None:
    other = f"/ostree/boot.0/rhcos/{BOOTCSUM}/1"
    assert parse_cmdline(f'ostree={BOOT_ARG} ostree="{other}"') == other


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("rw root=UUID=1 quiet", "no ostree= argument"),
        ("", "no ostree= argument"),
        ("ostree=/ostree/boot.1/rhcos", "is not /ostree/boot.N/"),
        ("ostree=/etc/passwd", "is not /ostree/boot.N/"),
        (f"ostree=/ostree/boot.1/rhcos/{BOOTCSUM}/x", "is not /ostree/boot.N/"),
    ],
)
def test_parse_cmdline_errors(text: str, fragment: str) -> None:
    with pytest.raises(HostError) as info:
        parse_cmdline(text)
    assert fragment in str(info.value)


_arg = st.from_regex(r"[A-Za-z_.]{1,10}(=[A-Za-z0-9_./,:-]{0,12})?", fullmatch=True).filter(
    lambda a: not a.startswith("ostree=")
)


@given(st.lists(_arg, max_size=5), st.lists(_arg, max_size=5), st.integers(0, 1), st.integers(0, 9))
def test_parse_cmdline_finds_ostree_among_other_args(
    before: list[str], after: list[str], version: int, serial: int
) -> None:
    value = f"/ostree/boot.{version}/rhcos/{BOOTCSUM}/{serial}"
    assert parse_cmdline(" ".join([*before, f"ostree={value}", *after])) == value


def test_parse_origin() -> None:
    text = f"[origin]\ncontainer-image-reference={REFERENCE}\n\n[rpmostree]\nfoo=bar\n"
    assert parse_origin(text) == REFERENCE


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("[origin]\nrefspec=fedora:fedora/x86_64/coreos/stable\n", "not a container image"),
        ("[origin]\nunlocked=development\n", "no container-image-reference"),
        ("[rpmostree]\nx=y\n", "no [origin] section"),
        ("container-image-reference=x\n", "not a key file"),
        ("[origin]\ncontainer-image-reference=\n", "empty container-image-reference"),
        ("", "no [origin] section"),
    ],
)
def test_parse_origin_errors(text: str, fragment: str) -> None:
    with pytest.raises(HostError) as info:
        parse_origin(text)
    assert fragment in str(info.value)


@given(
    st.from_regex(r"[a-z0-9-]{1,12}:[a-z0-9./@:-]{1,40}", fullmatch=True),
    st.dictionaries(
        st.from_regex(r"[a-z][a-z-]{0,8}", fullmatch=True), st.text("xyz ", max_size=5)
    ),
)
def test_parse_origin_finds_the_reference_among_other_keys(
    reference: str, extra: dict[str, str]
) -> None:
    extra.pop("container-image-reference", None)
    lines = ["[origin]", *(f"{k}={v}" for k, v in extra.items())]
    lines.insert(1 + len(extra) // 2, f"container-image-reference={reference}")
    assert parse_origin("\n".join(lines) + "\n") == reference


def rpm_ostree_json(*deployments: dict[str, object]) -> str:
    return json.dumps({"deployments": list(deployments), "transaction": None})


def test_parse_rpm_ostree_status() -> None:
    text = rpm_ostree_json(
        {"booted": False, "container-image-reference": "ostree-unverified-registry:q.io/x:old"},
        {
            "booted": True,
            "container-image-reference": f"ostree-unverified-registry:{IMAGE}:latest",
            "container-image-reference-digest": DIGEST,
        },
    )
    assert parse_rpm_ostree_status(text) == (f"ostree-unverified-registry:{IMAGE}:latest", DIGEST)


def test_parse_rpm_ostree_status_without_digest_field() -> None:
    text = rpm_ostree_json({"booted": True, "container-image-reference": REFERENCE})
    assert parse_rpm_ostree_status(text) == (REFERENCE, None)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("not json", "not JSON"),
        ("[]", "no deployments list"),
        (rpm_ostree_json({"booted": False}), "shows 0 booted deployments"),
        (rpm_ostree_json({"booted": True}, {"booted": True}), "shows 2 booted deployments"),
        (rpm_ostree_json({"booted": True, "checksum": "x"}), "no container-image-reference"),
        (
            rpm_ostree_json(
                {
                    "booted": True,
                    "container-image-reference": REFERENCE,
                    "container-image-reference-digest": "sha256:zz",
                }
            ),
            "is not sha256:<64 hex>",
        ),
    ],
)
def test_parse_rpm_ostree_status_errors(text: str, fragment: str) -> None:
    with pytest.raises(HostError) as info:
        parse_rpm_ostree_status(text)
    assert fragment in str(info.value)


# --- host trees ---------------------------------------------------------------------------


def make_host(
    tmp_path: Path, origin: str | None = None, absolute_link: bool = False
) -> tuple[Path, Path]:
    """A host tree as on RHCOS: boot.1 -> boot.1.1, and the boot entry -> the deployment."""
    root = tmp_path / "host"
    deploy = root / "ostree" / "deploy" / "rhcos" / "deploy"
    (deploy / f"{CHECKSUM}.0").mkdir(parents=True)
    if origin is not None:
        (deploy / f"{CHECKSUM}.0.origin").write_text(origin)
    entry = root / "ostree" / "boot.1.1" / "rhcos" / BOOTCSUM
    entry.mkdir(parents=True)
    target = (
        f"/ostree/deploy/rhcos/deploy/{CHECKSUM}.0"
        if absolute_link
        else f"../../../deploy/rhcos/deploy/{CHECKSUM}.0"
    )
    (entry / "0").symlink_to(target)
    (root / "ostree" / "boot.1").symlink_to("boot.1.1")
    cmdline = tmp_path / "cmdline"
    cmdline.write_text(f"BOOT_IMAGE=/vmlinuz rw ostree={BOOT_ARG} quiet\n")
    return root, cmdline


ORIGIN = f"[origin]\ncontainer-image-reference={REFERENCE}\n"


@pytest.mark.parametrize("absolute_link", [False, True])
def test_read_booted_image_from_origin(tmp_path: Path, absolute_link: bool) -> None:
    root, cmdline = make_host(tmp_path, ORIGIN, absolute_link)
    assert read_booted_image(root, cmdline) == BootedImage(DIGEST, REFERENCE, "ostree")


def test_read_booted_image_accepts_str_paths(tmp_path: Path) -> None:
    root, cmdline = make_host(tmp_path, ORIGIN)
    assert read_booted_image(str(root), str(cmdline)).digest == DIGEST


def error_of(root: Path, cmdline: Path) -> str:
    booted = read_booted_image(root, cmdline)
    assert booted.digest is None
    assert booted.error is not None
    assert "\n" not in booted.error
    return booted.error


def test_missing_origin(tmp_path: Path) -> None:
    root, cmdline = make_host(tmp_path, None)
    assert "origin file" in error_of(root, cmdline)
    assert "is missing" in error_of(root, cmdline)


def test_corrupt_origin(tmp_path: Path) -> None:
    root, cmdline = make_host(tmp_path, "\x00\x01garbage")
    assert "origin file is not a key file" in error_of(root, cmdline)


def test_origin_with_tag_only_reference(tmp_path: Path) -> None:
    root, cmdline = make_host(tmp_path, f"[origin]\ncontainer-image-reference={IMAGE}:latest\n")
    booted = read_booted_image(root, cmdline)
    assert booted.reference == f"{IMAGE}:latest"
    assert booted.error == f"booted reference {IMAGE}:latest has no digest"


def test_origin_with_unknown_transport(tmp_path: Path) -> None:
    root, cmdline = make_host(tmp_path, "[origin]\ncontainer-image-reference=oci:/var/img\n")
    assert "unknown transport 'oci'" in error_of(root, cmdline)


def test_cmdline_without_ostree(tmp_path: Path) -> None:
    root, cmdline = make_host(tmp_path, ORIGIN)
    cmdline.write_text("rw quiet\n")
    assert "no ostree= argument" in error_of(root, cmdline)


def test_cmdline_file_missing(tmp_path: Path) -> None:
    root, _ = make_host(tmp_path, ORIGIN)
    assert "No such file or directory" in error_of(root, tmp_path / "nope")


def test_link_escaping_the_root_is_refused(tmp_path: Path) -> None:
    root, cmdline = make_host(tmp_path, ORIGIN)
    # A decoy deployment outside the host root, reached by climbing out with "..".
    outside = tmp_path / "ostree" / "deploy" / "rhcos" / "deploy" / f"{CHECKSUM}.0"
    outside.mkdir(parents=True)
    outside.with_name(f"{CHECKSUM}.0.origin").write_text(ORIGIN)
    link = root / "ostree" / "boot.1.1" / "rhcos" / BOOTCSUM / "0"
    link.unlink()
    link.symlink_to(f"../../../../../ostree/deploy/rhcos/deploy/{CHECKSUM}.0")
    assert "a link leads outside the host root" in error_of(root, cmdline)


def test_origin_link_escaping_the_root_is_refused(tmp_path: Path) -> None:
    root, cmdline = make_host(tmp_path, None)
    secret = tmp_path / "secret.origin"
    secret.write_text(ORIGIN)
    origin = root / "ostree" / "deploy" / "rhcos" / "deploy" / f"{CHECKSUM}.0.origin"
    origin.symlink_to(os.path.relpath(secret, origin.parent))
    assert "outside the host root" in error_of(root, cmdline)


def test_absolute_origin_link_stays_inside_the_root(tmp_path: Path) -> None:
    root, cmdline = make_host(tmp_path, None)
    (root / "etc").mkdir()
    (root / "etc" / "real.origin").write_text(ORIGIN)
    origin = root / "ostree" / "deploy" / "rhcos" / "deploy" / f"{CHECKSUM}.0.origin"
    origin.symlink_to("/etc/real.origin")
    assert read_booted_image(root, cmdline).digest == DIGEST


def test_symlink_loop(tmp_path: Path) -> None:
    root, cmdline = make_host(tmp_path, ORIGIN)
    boot = root / "ostree" / "boot.1"
    boot.unlink()
    boot.symlink_to("boot.2")
    (root / "ostree" / "boot.2").symlink_to("boot.1")
    assert "too many levels of symbolic links" in error_of(root, cmdline)


def test_boot_entry_pointing_elsewhere_in_the_root(tmp_path: Path) -> None:
    root, cmdline = make_host(tmp_path, ORIGIN)
    (root / "etc").mkdir()
    link = root / "ostree" / "boot.1.1" / "rhcos" / BOOTCSUM / "0"
    link.unlink()
    link.symlink_to("/etc")
    assert "not /ostree/deploy/<os>/deploy/<checksum>.<serial>" in error_of(root, cmdline)


def test_dangling_boot_entry(tmp_path: Path) -> None:
    root, cmdline = make_host(tmp_path, ORIGIN)
    link = root / "ostree" / "boot.1.1" / "rhcos" / BOOTCSUM / "0"
    link.unlink()
    link.symlink_to("/ostree/deploy/rhcos/deploy/gone.0")
    assert "which is not a directory" in error_of(root, cmdline)


def test_resolve_inside_handles_dot_and_dotdot(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    real, relative = resolve_inside(tmp_path, "/a/./b/../b//")
    assert (real, relative) == (tmp_path / "a" / "b", "a/b")
    with pytest.raises(HostError, match="outside the host root"):
        resolve_inside(tmp_path, "/a/../../x")


# --- rpm-ostree -----------------------------------------------------------------------------


def python_command(code: str) -> tuple[str, ...]:
    return (sys.executable, "-c", code)


def test_rpm_ostree_command(tmp_path: Path) -> None:
    status = tmp_path / "status.json"
    status.write_text(rpm_ostree_json({"booted": True, "container-image-reference": REFERENCE}))
    command = python_command(f"print(open({str(status)!r}).read())")
    booted = read_booted_image(tmp_path, tmp_path / "unused", "rpm-ostree", command)
    assert booted == BootedImage(DIGEST, REFERENCE, "rpm-ostree")


def test_rpm_ostree_digest_field_wins(tmp_path: Path) -> None:
    other = "sha256:" + "c" * 64
    status = tmp_path / "status.json"
    status.write_text(
        rpm_ostree_json(
            {
                "booted": True,
                "container-image-reference": f"ostree-unverified-registry:{IMAGE}:latest",
                "container-image-reference-digest": other,
            }
        )
    )
    booted = read_booted_image_rpm_ostree(python_command(f"print(open({str(status)!r}).read())"))
    assert booted.digest == other


def test_rpm_ostree_failure_is_one_line() -> None:
    code = (
        "import sys; sys.stderr.write('warming up\\nerror: Unit rpm-ostreed not found\\n');"
        " sys.exit(1)"
    )
    booted = read_booted_image_rpm_ostree(python_command(code))
    assert booted.digest is None
    assert booted.error == f"{sys.executable} exited 1: error: Unit rpm-ostreed not found"


def test_rpm_ostree_timeout() -> None:
    booted = read_booted_image_rpm_ostree(python_command("import time; time.sleep(30)"), 0.2)
    assert booted.error == f"{sys.executable} timed out after 0.2 s"


def test_rpm_ostree_missing_command(tmp_path: Path) -> None:
    booted = read_booted_image_rpm_ostree((str(tmp_path / "no-such-rpm-ostree"), "status"))
    assert booted.error is not None
    assert booted.error.startswith("cannot run ")


def test_rpm_ostree_garbage_output() -> None:
    booted = read_booted_image_rpm_ostree(python_command("print('hello')"))
    assert booted.error is not None
    assert "not JSON" in booted.error


def test_rpm_ostree_empty_command() -> None:
    assert read_booted_image_rpm_ostree(()).error == "no rpm-ostree command configured"


def test_unknown_source(tmp_path: Path) -> None:
    booted = read_booted_image(tmp_path, tmp_path, "crystal-ball")
    assert booted == BootedImage(
        None, None, "crystal-ball", "unknown booted-image source 'crystal-ball'"
    )
