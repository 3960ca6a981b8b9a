"""Container image references as MCO and ostree write them, and their digests (pure).

MCO compares pullspec strings; drain-guard compares digests, so it needs to read the same
image whether it is written ``ostree-unverified-registry:host/repo@sha256:…`` (an origin
file) or ``host/repo@sha256:…`` (the ``desiredImage`` annotation).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "TRANSPORTS",
    "ImageRef",
    "ImageRefError",
    "digest_of",
    "parse_image_ref",
    "parse_pullspec",
]


class ImageRefError(ValueError):
    """An image reference that cannot be read; the message says which part and why."""


_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN_RE = re.compile(rf"^{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*(?::[0-9]+)?$")
_PATH_COMPONENT_RE = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$")
_TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
_REMOTE_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")

#: ostree-rs-ext transports whose rest is a registry pullspec (optionally behind a remote).
_OSTREE_REGISTRY = "ostree-unverified-registry"
_OSTREE_REMOTE_REGISTRY = "ostree-remote-registry"
#: ostree-rs-ext transports whose rest is ``<containers-transport>:<ref>``.
_OSTREE_IMAGE = ("ostree-unverified-image", "ostree-image-signed")
_OSTREE_REMOTE_IMAGE = "ostree-remote-image"
#: containers-image transports naming a registry image.
_REGISTRY_TRANSPORTS = ("docker://", "registry:")

#: How each known transport is written, for error messages and docs.
TRANSPORTS: tuple[str, ...] = (
    f"{_OSTREE_REGISTRY}:",
    f"{_OSTREE_REMOTE_REGISTRY}:<remote>:",
    *(f"{name}:docker://" for name in _OSTREE_IMAGE),
    f"{_OSTREE_REMOTE_IMAGE}:<remote>:docker://",
    *_REGISTRY_TRANSPORTS,
)


@dataclass(frozen=True)
class ImageRef:
    """A parsed reference; ``transport`` is the text before the pullspec, ``""`` if none."""

    transport: str
    domain: str | None
    path: str
    tag: str | None
    digest: str | None

    @property
    def pullspec(self) -> str:
        """The registry pullspec without any transport."""
        text = f"{self.domain}/{self.path}" if self.domain else self.path
        if self.tag is not None:
            text += f":{self.tag}"
        if self.digest is not None:
            text += f"@{self.digest}"
        return text

    def __str__(self) -> str:
        return self.transport + self.pullspec


def parse_pullspec(text: str) -> tuple[str | None, str, str | None, str | None]:
    """Split ``[host[:port]/]path[:tag][@sha256:<hex>]`` into (domain, path, tag, digest)."""
    if not text:
        raise ImageRefError("empty image pullspec")
    if any(ch.isspace() for ch in text):
        raise ImageRefError(f"image pullspec {text!r} contains whitespace")
    name, at, digest = text.partition("@")
    if at and not _DIGEST_RE.match(digest):
        raise ImageRefError(
            f"image pullspec {text!r}: digest {digest!r} is not sha256:<64 lowercase hex>"
        )
    domain: str | None = None
    first, slash, remainder = name.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        if not _DOMAIN_RE.match(first):
            raise ImageRefError(f"image pullspec {text!r}: invalid registry host {first!r}")
        domain, name = first, remainder
    tag: str | None = None
    last_slash = name.rfind("/")
    colon = name.rfind(":")
    if colon > last_slash:
        name, tag = name[:colon], name[colon + 1 :]
        if not _TAG_RE.match(tag):
            raise ImageRefError(f"image pullspec {text!r}: invalid tag {tag!r}")
    components = name.split("/")
    for component in components:
        if not _PATH_COMPONENT_RE.match(component):
            raise ImageRefError(
                f"image pullspec {text!r}: invalid repository path component {component!r}"
            )
    return domain, name, tag, digest if at else None


def _split_transport(text: str) -> tuple[str, str]:
    """Return (transport prefix including its separators, pullspec)."""
    head, colon, rest = text.partition(":")
    if not colon:
        return "", text
    if head == _OSTREE_REGISTRY:
        return head + ":", rest
    if head == _OSTREE_REMOTE_REGISTRY:
        remote, colon2, pullspec = rest.partition(":")
        if not colon2 or not _REMOTE_RE.match(remote):
            raise ImageRefError(f"image reference {text!r}: expected {head}:<remote>:<pullspec>")
        return f"{head}:{remote}:", pullspec
    if head in (*_OSTREE_IMAGE, _OSTREE_REMOTE_IMAGE):
        prefix = head + ":"
        if head == _OSTREE_REMOTE_IMAGE:
            remote, colon2, rest = rest.partition(":")
            if not colon2 or not _REMOTE_RE.match(remote):
                raise ImageRefError(
                    f"image reference {text!r}: expected {head}:<remote>:docker://<pullspec>"
                )
            prefix += remote + ":"
        for inner in _REGISTRY_TRANSPORTS:
            if rest.startswith(inner):
                return prefix + inner, rest[len(inner) :]
        expected = (
            f"{head}:<remote>:docker://<pullspec>"
            if head == _OSTREE_REMOTE_IMAGE
            else f"{head}:docker://<pullspec> or {head}:registry:<pullspec>"
        )
        raise ImageRefError(
            f"image reference {text!r}: unknown transport after {prefix!r} (expected {expected})"
        )
    if text.startswith("docker://"):
        return "docker://", text[len("docker://") :]
    if head == "registry":
        return "registry:", rest
    # "host:5000/repo" and "repo:tag" are pullspecs. Otherwise a ":" followed by text with a
    # "/" cannot separate a tag (tags have no "/"), so the head is a transport we do not know.
    if "/" in rest and not re.match(r"^[0-9]+/", rest):
        raise ImageRefError(
            f"image reference {text!r}: unknown transport {head!r} (known: {', '.join(TRANSPORTS)})"
        )
    return "", text


def parse_image_ref(text: str) -> ImageRef:
    """Parse ``[transport:]pullspec`` as found in origin files and MCO annotations."""
    stripped = text.strip()
    transport, pullspec = _split_transport(stripped)
    domain, path, tag, digest = parse_pullspec(pullspec)
    return ImageRef(transport, domain, path, tag, digest)


def digest_of(ref: str | ImageRef) -> str | None:
    """The ``sha256:…`` digest of a reference, or None when it names a tag only."""
    parsed = ref if isinstance(ref, ImageRef) else parse_image_ref(ref)
    return parsed.digest
