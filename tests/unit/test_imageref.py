"""Image references: transports, pullspecs, digests, and clear errors."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drain_guard.core.imageref import ImageRef, ImageRefError, digest_of, parse_image_ref

DIGEST = "sha256:6498f333a29f6d3943e852b039e77d894e47ee29b0212af38cf120ca7c4b85ce"
OCB = "image-registry.openshift-image-registry.svc:5000/openshift-machine-config-operator/ocb-image"


@pytest.mark.parametrize(
    ("text", "transport", "domain", "path", "tag", "digest"),
    [
        (f"{OCB}@{DIGEST}", "", OCB.split("/")[0], OCB.split("/", 1)[1], None, DIGEST),
        (
            f"ostree-unverified-registry:{OCB}@{DIGEST}",
            "ostree-unverified-registry:",
            OCB.split("/")[0],
            OCB.split("/", 1)[1],
            None,
            DIGEST,
        ),
        (
            f"ostree-unverified-image:docker://quay.io/org/os@{DIGEST}",
            "ostree-unverified-image:docker://",
            "quay.io",
            "org/os",
            None,
            DIGEST,
        ),
        (
            "ostree-image-signed:docker://quay.io/org/os:4.15",
            "ostree-image-signed:docker://",
            "quay.io",
            "org/os",
            "4.15",
            None,
        ),
        (
            f"ostree-image-signed:registry:quay.io/os@{DIGEST}",
            "ostree-image-signed:registry:",
            "quay.io",
            "os",
            None,
            DIGEST,
        ),
        (
            f"ostree-remote-image:fedora:docker://quay.io/fedora/coreos:stable@{DIGEST}",
            "ostree-remote-image:fedora:docker://",
            "quay.io",
            "fedora/coreos",
            "stable",
            DIGEST,
        ),
        (
            f"ostree-remote-registry:rhcos:quay.io/openshift/os@{DIGEST}",
            "ostree-remote-registry:rhcos:",
            "quay.io",
            "openshift/os",
            None,
            DIGEST,
        ),
        ("docker://localhost:5000/a/b:c", "docker://", "localhost:5000", "a/b", "c", None),
        ("registry:localhost/x", "registry:", "localhost", "x", None, None),
        ("ubuntu:22.04", "", None, "ubuntu", "22.04", None),
        ("library/ubuntu", "", None, "library/ubuntu", None, None),
        ("myhost:5000/a", "", "myhost:5000", "a", None, None),
    ],
)
def test_parse(
    text: str, transport: str, domain: str | None, path: str, tag: str | None, digest: str | None
) -> None:
    ref = parse_image_ref(text)
    assert ref == ImageRef(transport, domain, path, tag, digest)
    assert str(ref) == text
    assert digest_of(text) == digest


def test_digest_of_same_image_in_origin_and_annotation_forms() -> None:
    """The seed: the origin's reference and desiredImage name one image."""
    assert digest_of(f"ostree-unverified-registry:{OCB}@{DIGEST}") == digest_of(f"{OCB}@{DIGEST}")
    assert digest_of(parse_image_ref(f"{OCB}@{DIGEST}")) == DIGEST


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "empty image pullspec"),
        ("   ", "empty image pullspec"),
        ("quay.io/a b", "contains whitespace"),
        ("quay.io/os@sha256:abc", "is not sha256:<64 lowercase hex>"),
        ("quay.io/os@sha512:" + "a" * 128, "is not sha256"),
        (f"quay.io/os@{DIGEST.upper()}", "is not sha256"),
        ("quay.io/OS", "invalid repository path component 'OS'"),
        ("quay.io//os", "invalid repository path component ''"),
        ("quay.io/os:", "invalid tag ''"),
        ("quay.io/os:-x", "invalid tag"),
        ("-bad.io/os", "invalid registry host"),
        ("oci:/var/lib/image", "unknown transport 'oci'"),
        ("containers-storage:quay.io/os", "unknown transport 'containers-storage'"),
        ("docker:quay.io/os", "unknown transport 'docker'"),
        ("ostree-unverified-image:oci:/x", "expected ostree-unverified-image:docker://"),
        ("ostree-remote-image:docker://quay.io/x", "expected ostree-remote-image:<remote>"),
        ("ostree-remote-registry:quay.io/x", "expected ostree-remote-registry:<remote>"),
        ("ostree-remote-registry::quay.io/x", "expected ostree-remote-registry:<remote>"),
    ],
)
def test_errors_are_clear(text: str, fragment: str) -> None:
    with pytest.raises(ImageRefError) as info:
        parse_image_ref(text)
    assert fragment in str(info.value)


def test_error_is_value_error() -> None:
    with pytest.raises(ValueError, match="unknown transport"):
        digest_of("oci:/x")


# --- hypothesis: generated references print back to themselves ------------------------------

_component = st.from_regex(r"[a-z0-9]{1,6}([._-][a-z0-9]{1,4})?", fullmatch=True)
_domain = st.one_of(
    st.from_regex(r"[a-z0-9]{1,8}(\.[a-z0-9]{1,5}){1,2}", fullmatch=True),
    st.builds(
        lambda h, p: f"{h}:{p}", st.sampled_from(["localhost", "reg"]), st.integers(1, 65535)
    ),
)
_tag = st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,10}", fullmatch=True)
_digest = st.from_regex(r"sha256:[0-9a-f]{64}", fullmatch=True)
_transport = st.sampled_from(
    [
        "",
        "ostree-unverified-registry:",
        "ostree-unverified-image:docker://",
        "ostree-image-signed:docker://",
        "ostree-remote-image:fedora:docker://",
        "ostree-remote-registry:rhcos:",
        "docker://",
        "registry:",
    ]
)


@given(
    _transport,
    _domain,
    st.lists(_component, min_size=1, max_size=3),
    st.none() | _tag,
    st.none() | _digest,
)
def test_round_trip(
    transport: str, domain: str, path: list[str], tag: str | None, digest: str | None
) -> None:
    ref = ImageRef(transport, domain, "/".join(path), tag, digest)
    parsed = parse_image_ref(str(ref))
    assert parsed == ref
    assert digest_of(str(ref)) == digest


@given(st.text(max_size=60))
def test_any_text_parses_or_fails_cleanly(text: str) -> None:
    try:
        ref = parse_image_ref(text)
    except ImageRefError:
        return
    assert parse_image_ref(str(ref)) == ref
