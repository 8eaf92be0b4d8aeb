"""Finding, verifying and downloading a card's files.

Search order (first complete copy wins):

1. the ``data_dir`` argument,
2. ``$HARNESS_DATA_DIR``,
3. the cache, ``$HARNESS_CACHE_DIR`` or ``~/.cache/harness`` (files under ``data/<card name>/``),
4. a download into the cache, from the card's own addresses or, when ``$HARNESS_DATA_MIRROR``
   is set, from its mirrors instead (base URLs, ``http(s)://`` or ``file://``, separated by
   spaces or commas, tried in order; a mirror holds ``<card name>/<download file name>``,
   the cache's ``data/`` layout). A mirror serves the nodes of a cluster without internet
   access: they never wait on addresses they cannot reach.

Inside a data directory a file may lie at ``<card name>/<filename>``, the
card's extra ``search_paths`` (``tinyshakespeare/input.txt``, ``ptb/ptb.char.train.txt``:
the layout of ``../shared/data``), or, for members of an archive, at the member's path
(``wikitext-2-raw/wiki.train.raw``, as ``unzip`` leaves it); the archive itself may lie at
``<card name>/<archive>`` or ``<archive>``.

Every file found is checked against the card: sha256 where one is published, else the
byte size (and the result says so). A mismatching file in a user directory is an error
(we never silently use or delete user files); a mismatching file in the cache is deleted
and fetched again.

Downloads stream into a temporary file in the destination folder while hashing, show a
progress bar (tqdm), check the announced length, the size and the sha256 (and, for an
archive, its members), and only then ``os.replace`` the temporary file onto its final
name. An interrupted, truncated or corrupt download therefore never leaves a file under
a name a later run would trust; two processes downloading at once each write their own
temporary file and the last complete one wins.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import logging
import os
import tarfile
import tempfile
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from harness import __version__
from harness.datasets.cards import Archive, DataFile, DatasetCard
from harness.datasets.data_dir import resolve_data_dir_env
from harness.errors import InputError

log = logging.getLogger(__name__)

_CHUNK = 1 << 20


# --------------------------------------------------------------------------------------
# places
# --------------------------------------------------------------------------------------
def cache_root(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """``cache_dir``, else ``$HARNESS_CACHE_DIR``, else ``~/.cache/harness``."""
    if cache_dir is not None:
        return Path(cache_dir)
    env = os.environ.get("HARNESS_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "harness"


def search_roots(
    data_dir: str | os.PathLike[str] | None = None, cache_dir: str | os.PathLike[str] | None = None
) -> list[tuple[str, Path]]:
    """The places searched, in order, as ``(label, folder)``, each folder absolute (a relative one
    as this process's working directory reads it: a message then names the folder really
    searched) and each once."""
    roots: list[tuple[str, Path]] = []
    if data_dir is not None:
        roots.append(("data_dir", Path(data_dir)))
    env = resolve_data_dir_env()  # a relative value, resolved once (harness.datasets.data_dir)
    if env is not None:
        roots.append(("$HARNESS_DATA_DIR", env))
    roots.append(("cache", cache_root(cache_dir) / "data"))
    unique: dict[Path, str] = {}
    for label, folder in roots:
        unique.setdefault(Path(os.path.abspath(folder.expanduser())), label)
    return [(label, folder) for folder, label in unique.items()]


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


def file_candidates(card: DatasetCard, f: DataFile) -> list[str]:
    """Relative paths under a data directory where ``f`` may lie, in order of preference.

    A bare ``<filename>`` is not searched (``wiki.train.raw`` or ``input.txt`` could belong
    to any corpus); distinctive bare names are listed in the card's ``search_paths``.
    """
    paths = [*f.search_paths, f"{card.name}/{f.filename}"]
    if f.member:
        paths += [f"{card.name}/{f.member}", f.member]
    return _unique(paths)


def archive_candidates(card: DatasetCard) -> list[str]:
    assert card.archive is not None
    return _unique([f"{card.name}/{card.archive.filename}", card.archive.filename])


#: Base URLs that replace the cards' own download addresses (see the module docstring).
MIRROR_ENV = "HARNESS_DATA_MIRROR"


def download_urls(card: DatasetCard, filename: str, own: tuple[str, ...]) -> tuple[str, ...]:
    """Where to download ``filename`` of ``card`` from: ``<mirror>/<card name>/<filename>``
    for every mirror in ``$HARNESS_DATA_MIRROR``, else the card's own addresses ``own``."""
    bases = os.environ.get(MIRROR_ENV, "").replace(",", " ").split()
    if bases:
        return tuple(f"{base.rstrip('/')}/{card.name}/{filename}" for base in bases)
    return own


def _download_target(card: DatasetCard, cache_dir: str | os.PathLike[str] | None, filename: str) -> Path:
    return cache_root(cache_dir) / "data" / card.name / filename


def where_to_put(card: DatasetCard, data_dir: str | os.PathLike[str] | None = None, cache_dir=None) -> str:
    """Advice for working offline: which file to put into which folder."""
    user_roots = [p for label, p in search_roots(data_dir, cache_dir) if label != "cache"]
    if card.archive is not None:
        extracted = ", ".join(f.member or f.filename for f in card.files)
        what = f"{card.archive.filename} (from {card.archive.urls[0]}), or the extracted {extracted},"
    else:
        what = ", ".join(f"{f.filename} (from {f.urls[0]})" for f in card.files)
    folders = [str(r / card.name) for r in user_roots] or [f"$HARNESS_DATA_DIR/{card.name}"]
    folders.append(str(cache_root(cache_dir) / "data" / card.name))
    return (
        f"put {what} into one of these folders: "
        + "; ".join(folders)
        + " (set HARNESS_DATA_DIR or pass data_dir / --data-dir to search another folder)"
    )


# --------------------------------------------------------------------------------------
# checks
# --------------------------------------------------------------------------------------
def sha256_file(path: str | os.PathLike[str]) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


@dataclass(frozen=True)
class FileCheck:
    """The outcome of checking one file (or archive) against its card."""

    path: Path
    sha256: str  # actual
    size: int  # actual bytes
    status: str  # "sha256 ok" | "size ok (no published sha256)" | "unchecked (no published checksum)"

    @property
    def trusted(self) -> bool:
        return not self.status.startswith("unchecked")


class ChecksumMismatch(InputError):
    """A file's bytes differ from the card (message names the file, expected and actual)."""

    def __init__(self, message: str, *, path: Path | None = None) -> None:
        super().__init__(message)
        self.path = path


def _status(sha256: str | None, size: int | None, members_checked: bool = False) -> str:
    if sha256:
        return "sha256 ok"
    if members_checked:
        return "sha256 ok (members)"
    if size is not None:
        return "size ok (no published sha256)"
    return "unchecked (no published checksum)"


def check_file(path: Path, *, sha256: str | None, size: int | None, label: str) -> FileCheck:
    """Hash ``path`` and compare with the card; :class:`ChecksumMismatch` on a difference."""
    actual_size = path.stat().st_size
    if size is not None and actual_size != size:
        raise ChecksumMismatch(f"{label} at {path}: expected {size:,} bytes, found {actual_size:,}", path=path)
    actual = sha256_file(path)
    if sha256 and actual != sha256:
        raise ChecksumMismatch(f"{label} at {path}: sha256 mismatch, expected {sha256}, actual {actual}", path=path)
    return FileCheck(path, actual, actual_size, _status(sha256, size))


# --------------------------------------------------------------------------------------
# archives
# --------------------------------------------------------------------------------------
def _norm(name: str) -> str:
    while name.startswith("./"):
        name = name[2:]
    return name.lstrip("/")


def _match_member(names: list[str], member: str, archive: Path) -> str:
    target = _norm(member)
    normed = {_norm(n): n for n in names}
    if target in normed:
        return normed[target]
    hits = [orig for n, orig in normed.items() if n.endswith("/" + target)]
    if len(hits) == 1:
        return hits[0]
    raise InputError(f"archive {archive} has no member {member!r}" + (f" (ambiguous: {hits})" if hits else ""))


@contextlib.contextmanager
def open_member(archive: Path, member: str) -> Iterator[BinaryIO]:
    """A binary stream of ``member`` of a zip or tar(.gz/.bz2/.xz) archive."""
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zf:
            with zf.open(_match_member(zf.namelist(), member, archive)) as fh:
                yield fh  # type: ignore[misc]
        return
    try:
        tf = tarfile.open(archive, "r:*")
    except (tarfile.TarError, OSError) as exc:
        raise InputError(f"{archive} is neither a zip nor a tar archive ({exc})") from None
    with tf:
        fh = tf.extractfile(_match_member(tf.getnames(), member, archive))
        if fh is None:
            raise InputError(f"archive {archive}: member {member!r} is not a regular file")
        with fh:
            yield fh  # type: ignore[misc]


def member_sizes(archive: Path, members: list[str]) -> dict[str, int]:
    """Uncompressed sizes of ``members`` from the archive's directory (cheap, no decompression)."""
    out: dict[str, int] = {}
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zf:
            names = zf.namelist()
            for m in members:
                out[m] = zf.getinfo(_match_member(names, m, archive)).file_size
        return out
    try:
        with tarfile.open(archive, "r:*") as tf:
            names = tf.getnames()
            for m in members:
                out[m] = tf.getmember(_match_member(names, m, archive)).size
    except tarfile.TarError as exc:
        raise InputError(f"{archive} is neither a zip nor a tar archive ({exc})") from None
    return out


def check_members(card: DatasetCard, archive: Path, *, hash_members: bool) -> bool:
    """Every member exists with its published size; with ``hash_members``, its sha256 too.

    Returns whether any member sha256 was checked. Raises :class:`ChecksumMismatch`.
    """
    members = [f for f in card.files if f.member]
    sizes = member_sizes(archive, [f.member for f in members])  # type: ignore[misc]
    hashed = False
    for f in members:
        if f.size is not None and sizes[f.member] != f.size:  # type: ignore[index]
            raise ChecksumMismatch(
                f"{card.name}: member {f.member} of {archive}: expected {f.size:,} bytes, found {sizes[f.member]:,}",  # type: ignore[index]
                path=archive,
            )
        if hash_members and f.sha256:
            h = hashlib.sha256()
            with open_member(archive, f.member) as fh:  # type: ignore[arg-type]
                while chunk := fh.read(_CHUNK):
                    h.update(chunk)
            if h.hexdigest() != f.sha256:
                raise ChecksumMismatch(
                    f"{card.name}: member {f.member} of {archive}: sha256 mismatch, expected {f.sha256}, "
                    f"actual {h.hexdigest()}",
                    path=archive,
                )
            hashed = True
    return hashed


def check_archive(card: DatasetCard, path: Path) -> FileCheck:
    """Check an archive file: its own sha256/size, member sizes, and member sha256s when
    the archive itself has no published sha256."""
    archive: Archive = card.archive  # type: ignore[assignment]
    check = check_file(path, sha256=archive.sha256, size=archive.size, label=f"{card.name}: archive {archive.filename}")
    hashed = check_members(card, path, hash_members=not archive.sha256)
    if hashed:
        return FileCheck(check.path, check.sha256, check.size, _status(None, None, members_checked=True))
    return check


# --------------------------------------------------------------------------------------
# located corpora
# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Located:
    """A complete, checked copy of a card's files.

    Either ``files`` (role -> extracted file) or ``archive`` (read members from it).
    ``where``: ``data_dir``, ``$HARNESS_DATA_DIR``, ``cache`` or ``downloaded``.
    """

    card: DatasetCard
    where: str
    files: dict[str, Path]
    archive: Path | None
    checks: tuple[FileCheck, ...]

    @property
    def paths(self) -> tuple[Path, ...]:
        return (self.archive,) if self.archive is not None else tuple(self.files[r] for r in self.card.roles)

    @property
    def size(self) -> int:
        return sum(c.size for c in self.checks)

    @property
    def status(self) -> str:
        """One verification summary, e.g. ``sha256 ok`` or ``size ok (no published sha256)``."""
        statuses = _unique([c.status for c in self.checks])
        return statuses[0] if len(statuses) == 1 else "; ".join(statuses)

    @property
    def fingerprint(self) -> dict[str, str]:
        """What the encoded-token cache is keyed by: the sha256 of every source read."""
        return {str(c.path.name): c.sha256 for c in self.checks}

    def file_label(self, role: str) -> str:
        """The file of ``role`` as the user finds it: its path, or ``<archive>:<member>``."""
        if self.archive is not None:
            return f"{self.archive}:{self.card.file(role).member}"
        return str(self.files[role])

    @contextlib.contextmanager
    def open(self, role: str) -> Iterator[BinaryIO]:
        """Binary stream of the file with ``role`` (from disk or from the archive)."""
        if self.archive is not None:
            with open_member(self.archive, self.card.file(role).member) as fh:  # type: ignore[arg-type]
                yield fh
        else:
            with open(self.files[role], "rb") as fh:
                yield fh


def _find_first(root: Path, rels: list[str]) -> Path | None:
    for rel in rels:
        p = root / rel
        if p.is_file():
            return p
    return None


def locate(
    card: DatasetCard,
    *,
    data_dir: str | os.PathLike[str] | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
) -> Located | None:
    """The first complete, checked copy of ``card``'s files, or None (no download).

    A copy in a user folder that fails its check raises :class:`ChecksumMismatch`;
    one in the cache is deleted (it will be downloaded again).
    """
    if card.synthetic:
        raise InputError(f"{card.name} is generated, not fetched: use harness.datasets.load({card.name!r})")
    for label, root in search_roots(data_dir, cache_dir):
        if not root.is_dir():
            continue
        try:
            found = {f.role: _find_first(root, file_candidates(card, f)) for f in card.files}
            if all(found.values()):
                checks = tuple(
                    check_file(found[f.role], sha256=f.sha256, size=f.size, label=f"{card.name}: {f.filename}")  # type: ignore[arg-type]
                    for f in card.files
                )
                return Located(card, label, {r: p for r, p in found.items() if p}, None, checks)
            if card.archive is not None:
                arch = _find_first(root, archive_candidates(card))
                if arch is not None:
                    return Located(card, label, {}, arch, (check_archive(card, arch),))
            partial = [str(p) for p in found.values() if p]
            if partial:
                log.warning("%s: incomplete copy in %s (only %s); looking further", card.name, root, ", ".join(partial))
        except ChecksumMismatch as exc:
            if label != "cache":
                raise ChecksumMismatch(
                    f"{exc}\nReplace or remove that file (it does not match the dataset card).", path=exc.path
                ) from None
            log.warning("%s; deleting the cached copy", exc)
            for p in root.glob(f"{card.name}/*"):
                if p.is_file() and not p.name.startswith("."):
                    p.unlink(missing_ok=True)
    return None


# --------------------------------------------------------------------------------------
# downloads
# --------------------------------------------------------------------------------------
class _AttemptFailed(Exception):
    """One URL failed (network error, truncated, wrong checksum); the next one is tried."""


def fsync_path(path: Path) -> None:
    """Flush a file or directory entry to disk (best effort: some filesystems refuse)."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _download_one(
    url: str,
    dest: Path,
    *,
    sha256: str | None,
    size: int | None,
    progress: bool,
    timeout: float,
    validate: Callable[[Path], object] | None,
) -> FileCheck:
    from tqdm.auto import tqdm

    fd, tmp_name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    tmp: Path | None = Path(tmp_name)
    try:
        h = hashlib.sha256()
        received = 0
        request = urllib.request.Request(url, headers={"User-Agent": f"attention-harness/{__version__}"})
        with os.fdopen(fd, "wb") as out:
            try:
                with urllib.request.urlopen(request, timeout=timeout) as response:
                    announced = response.headers.get("Content-Length")
                    announced = int(announced) if announced and announced.isdigit() else None
                    with tqdm(
                        total=announced or size,
                        unit="B",
                        unit_scale=True,
                        unit_divisor=1024,
                        desc=f"download {dest.name}",
                        disable=not progress,
                    ) as bar:
                        while chunk := response.read(_CHUNK):
                            out.write(chunk)
                            h.update(chunk)
                            received += len(chunk)
                            bar.update(len(chunk))
            except urllib.error.HTTPError as exc:
                raise _AttemptFailed(f"HTTP {exc.code} {exc.reason}") from None
            except urllib.error.URLError as exc:
                raise _AttemptFailed(f"cannot connect ({exc.reason})") from None
            except (OSError, http.client.HTTPException) as exc:
                raise _AttemptFailed(
                    f"connection lost after {received:,} bytes ({type(exc).__name__}: {exc}); incomplete "
                    "download discarded"
                ) from None
            out.flush()
            os.fsync(out.fileno())
        # http.client returns a short body without an error when the peer closes early.
        if announced is not None and received != announced:
            raise _AttemptFailed(
                f"connection closed after {received:,} of {announced:,} announced bytes; incomplete download discarded"
            )
        if size is not None and received != size:
            raise _AttemptFailed(f"size mismatch: expected {size:,} bytes, received {received:,}; download discarded")
        actual = h.hexdigest()
        if sha256 and actual != sha256:
            raise _AttemptFailed(f"sha256 mismatch: expected {sha256}, actual {actual}; download discarded")
        check = FileCheck(dest, actual, received, _status(sha256, size))
        if validate is not None:
            try:
                result = validate(tmp)  # e.g. archive members present, member sha256s
            except InputError as exc:
                raise _AttemptFailed(f"{exc}; download discarded") from None
            if isinstance(result, FileCheck):
                check = FileCheck(dest, actual, received, result.status)
        os.replace(tmp, dest)
        tmp = None
        fsync_path(dest.parent)
        return check
    finally:
        if tmp is not None:
            tmp.unlink(missing_ok=True)


def download_file(
    urls: tuple[str, ...],
    dest: Path,
    *,
    sha256: str | None,
    size: int | None,
    progress: bool = True,
    timeout: float = 60.0,
    validate: Callable[[Path], object] | None = None,
    advice: str = "",
) -> FileCheck:
    """Download the first URL that yields the right bytes to ``dest`` (atomic rename).

    Raises InputError listing every URL with its failure, plus ``advice``.
    """
    if not urls:
        raise InputError(f"no download address for {dest.name}. {advice}")
    dest.parent.mkdir(parents=True, exist_ok=True)
    failures = []
    for url in urls:
        log.info("downloading %s -> %s", url, dest)
        try:
            return _download_one(
                url, dest, sha256=sha256, size=size, progress=progress, timeout=timeout, validate=validate
            )
        except _AttemptFailed as exc:
            failures.append(f"  {url}: {exc}")
    with contextlib.suppress(OSError):
        dest.parent.rmdir()  # only if empty: a failed first download leaves no trace
    raise InputError(
        f"could not download {dest.name}:\n"
        + "\n".join(failures)
        + f"\nNothing was saved. Offline? To use a copy you downloaded yourself, {advice}"
    )


def fetch(
    card: DatasetCard,
    *,
    data_dir: str | os.PathLike[str] | None = None,
    download: bool = True,
    cache_dir: str | os.PathLike[str] | None = None,
    progress: bool = True,
    timeout: float = 60.0,
) -> Located:
    """Find ``card``'s files (see the module docstring), downloading them if needed.

    Raises InputError when they are nowhere and cannot be downloaded (``download=False``,
    offline, a failing server or wrong bytes); the message names the URLs and where to
    put the files by hand.
    """
    found = locate(card, data_dir=data_dir, cache_dir=cache_dir)
    if found is not None:
        return found
    advice = where_to_put(card, data_dir, cache_dir)
    searched = ", ".join(f"{label} ({p})" for label, p in search_roots(data_dir, cache_dir))
    if not download:
        raise InputError(
            f"dataset {card.name!r} not found (searched {searched}) and downloading is off.\n"
            f"Download it from {', '.join(card.urls)}, or {advice}"
        )
    if card.archive is not None:
        dest = _download_target(card, cache_dir, card.archive.filename)
        check = download_file(
            download_urls(card, card.archive.filename, card.archive.urls),
            dest,
            sha256=card.archive.sha256,
            size=card.archive.size,
            progress=progress,
            timeout=timeout,
            validate=lambda tmp: check_archive(card, tmp),
            advice=advice,
        )
        return Located(card, "downloaded", {}, dest, (check,))
    files: dict[str, Path] = {}
    checks = []
    for f in card.files:
        dest = _download_target(card, cache_dir, f.filename)
        checks.append(
            download_file(
                download_urls(card, f.filename, f.urls),
                dest,
                sha256=f.sha256,
                size=f.size,
                progress=progress,
                timeout=timeout,
                advice=advice,
            )
        )
        files[f.role] = dest
    return Located(card, "downloaded", files, None, tuple(checks))
