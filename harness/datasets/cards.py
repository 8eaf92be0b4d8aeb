"""Dataset cards: what a corpus is, where its bytes come from and how it is split.

A card is data (a frozen dataclass), so a test or a user can describe a corpus of their
own, e.g. the same card with another download address, and hand it to
:func:`harness.datasets.fetch.fetch` or :func:`harness.datasets.corpus.load_card`:

    >>> from dataclasses import replace
    >>> card = replace(REGISTRY["tinyshakespeare"], name="my-copy")

Checksums and sizes are those of ``../shared/data/MANIFEST.md``; where the manifest has
none, the card says so (``notes``) and the download is checked by byte size only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from harness.errors import InputError

Tokenizer = Literal["char", "ptb-char", "byte"]
Role = Literal["text", "train", "val", "test"]
SPLITS: tuple[str, ...] = ("train", "val", "test")

_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def _check_digest(sha256: str | None, what: str) -> None:
    if sha256 is not None and not _SHA256.match(sha256):
        raise InputError(f"{what}: sha256 must be 64 lower-case hex digits, got {sha256!r}")


@dataclass(frozen=True)
class Archive:
    """A downloadable archive (zip, tar, tgz) that holds a card's files as members."""

    filename: str  # name on disk, e.g. "enwik8.zip"
    urls: tuple[str, ...]  # tried in order (first: the pinned / current mirror)
    sha256: str | None = None  # of the archive file; None where none is published
    size: int | None = None  # bytes of the archive file; None where unknown

    def __post_init__(self) -> None:
        _check_digest(self.sha256, f"archive {self.filename}")


@dataclass(frozen=True)
class DataFile:
    """One file of a corpus: the whole text (``role="text"``) or one split's file.

    ``urls`` are direct addresses of the file; ``member`` is its path inside the card's
    archive (a path suffix is enough: ``simple-examples/data/ptb.char.train.txt`` also
    matches ``./simple-examples/data/ptb.char.train.txt``). ``search_paths`` are extra
    places, relative to a data directory, where a copy may lie (beyond the default
    ``<card name>/<filename>``, ``<card name>/<member>`` and ``<member>``).
    """

    role: Role
    filename: str
    sha256: str | None = None
    size: int | None = None
    urls: tuple[str, ...] = ()
    member: str | None = None
    search_paths: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _check_digest(self.sha256, f"file {self.filename}")


@dataclass(frozen=True)
class SplitRule:
    """How the token sequence becomes train / val / test.

    - ``fraction``: one file; train = ``tokens[:int(f * n)]``, val = the rest, no test
      (nanoGPT's ``shakespeare_char`` rule).
    - ``counts``: one file; consecutive blocks of ``counts = (n_train, n_val, n_test)``
      tokens, which must add up to the file's length (enwik8/text8: 90M / 5M / 5M).
    - ``files``: one file per split (roles ``train``, ``val``, ``test``).
    - ``generated``: percentages ``counts`` of a generated text (synthetic-salience).
    """

    kind: Literal["fraction", "counts", "files", "generated"]
    train_fraction: float | None = None
    counts: tuple[int, int, int] | None = None

    @classmethod
    def fraction(cls, train_fraction: float) -> SplitRule:
        if not 0.0 < train_fraction < 1.0:
            raise InputError(f"train_fraction must lie in (0, 1), got {train_fraction}")
        return cls("fraction", train_fraction=train_fraction)

    @classmethod
    def by_counts(cls, n_train: int, n_val: int, n_test: int) -> SplitRule:
        if min(n_train, n_val, n_test) <= 0:
            raise InputError(f"split counts must be positive, got {(n_train, n_val, n_test)}")
        return cls("counts", counts=(n_train, n_val, n_test))

    @classmethod
    def by_files(cls) -> SplitRule:
        return cls("files")

    def describe(self) -> str:
        if self.kind == "fraction":
            return f"first {self.train_fraction:.0%} train, last {1 - self.train_fraction:.0%} val (no test)"
        if self.kind == "counts":
            a, b, c = self.counts
            return f"consecutive blocks: {a:,} train, {b:,} val, {c:,} test tokens"
        if self.kind == "generated":
            a, b, c = self.counts
            return f"{a} % / {b} % / {c} % of the generated characters (train / val / test)"
        return "fixed files: train / valid / test"


@dataclass(frozen=True)
class DatasetCard:
    """Everything the harness needs to find, verify, split and tokenise one corpus.

    ``tokenizer``: ``char`` (one token per Unicode character of the UTF-8 text),
    ``ptb-char`` (Mikolov's format: the file's space-separated symbols, ``_`` for a word
    boundary and the line break are tokens, the separating spaces are not) or ``byte``
    (one token per byte, vocabulary 256). ``unit`` is what bits-per-token are per.
    """

    name: str
    description: str
    files: tuple[DataFile, ...]
    split: SplitRule
    tokenizer: Tokenizer
    licence: str
    archive: Archive | None = None
    unit: Literal["character", "byte"] = "character"
    notes: str = ""
    synthetic: bool = False
    citation: str = ""
    roles: tuple[str, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "roles", tuple(f.role for f in self.files))
        if self.synthetic:
            return
        if not self.files:
            raise InputError(f"dataset card {self.name!r} lists no files")
        expected = ("text",) if self.split.kind in ("fraction", "counts") else ("train", "val", "test")
        if sorted(self.roles) != sorted(expected):
            raise InputError(
                f"dataset card {self.name!r}: split rule {self.split.kind!r} needs files with roles "
                f"{expected}, got {self.roles}"
            )
        for f in self.files:
            if not f.urls and not (self.archive and f.member):
                raise InputError(
                    f"dataset card {self.name!r}: file {f.filename} has neither urls nor an archive member"
                )

    def file(self, role: str) -> DataFile:
        for f in self.files:
            if f.role == role:
                return f
        raise KeyError(role)

    @property
    def urls(self) -> tuple[str, ...]:
        """Every download address of the card (the archive's, else the files')."""
        if self.archive is not None:
            return self.archive.urls
        return tuple(u for f in self.files for u in f.urls)

    @property
    def download_size(self) -> int | None:
        """Expected bytes to download, where known."""
        if self.archive is not None:
            return self.archive.size
        sizes = [f.size for f in self.files]
        return None if any(s is None for s in sizes) else sum(sizes)  # type: ignore[arg-type]

    @property
    def checksum_kind(self) -> str:
        """``sha256``, ``size`` (no published sha256: byte size checked), ``none`` or ``generated``."""
        if self.synthetic:
            return "generated"
        members_sha = all(f.sha256 for f in self.files)
        members_size = all(f.size for f in self.files)
        if self.archive is not None:
            if self.archive.sha256 or members_sha:
                return "sha256"
            return "size" if (self.archive.size or members_size) else "none"
        if members_sha:
            return "sha256"
        return "size" if members_size else "none"


_MIKOLOV_TGZ = Archive(
    filename="simple-examples.tgz",
    urls=("http://www.fit.vutbr.cz/~imikolov/rnnlm/simple-examples.tgz",),
    sha256=None,  # not published; the three members below carry sha256s
)


def _ptb_file(role: str, split_name: str, sha256: str, size: int) -> DataFile:
    filename = f"ptb.char.{split_name}.txt"
    return DataFile(
        role=role,  # type: ignore[arg-type]
        filename=filename,
        sha256=sha256,
        size=size,
        member=f"simple-examples/data/{filename}",
        search_paths=(f"ptb/{filename}", filename, f"pennchar/{split_name}.txt"),
    )


def _wikitext_card(name: str, folder: str, archive: Archive, size_note: str) -> DatasetCard:
    return DatasetCard(
        name=name,
        description=f"WikiText ({folder}), raw (untokenised) Wikipedia Good/Featured articles, character level",
        files=tuple(
            DataFile(role=role, filename=f"wiki.{split}.raw", member=f"{folder}/wiki.{split}.raw")  # type: ignore[arg-type]
            for role, split in (("train", "train"), ("val", "valid"), ("test", "test"))
        ),
        split=SplitRule.by_files(),
        tokenizer="char",
        licence="CC BY-SA 3.0 (Merity et al., 2016, 'Pointer Sentinel Mixture Models')",
        archive=archive,
        notes=size_note,
        citation="Merity, Xiong, Bradbury, Socher (2016). Pointer Sentinel Mixture Models.",
    )


REGISTRY: dict[str, DatasetCard] = {
    "tinyshakespeare": DatasetCard(
        name="tinyshakespeare",
        description="Karpathy's TinyShakespeare (40,000 lines of Shakespeare), character level",
        files=(
            DataFile(
                role="text",
                filename="input.txt",
                sha256="86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
                size=1_115_394,
                urls=(
                    "https://raw.githubusercontent.com/karpathy/char-rnn/6f9487a6fe5b420b7ca9afb0d7c078e37c1d1b4e/data/tinyshakespeare/input.txt",
                    "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt",
                ),
                search_paths=("tinyshakespeare/input.txt",),
            ),
        ),
        split=SplitRule.fraction(0.9),
        tokenizer="char",
        licence="text public domain; karpathy/char-rnn repository MIT",
    ),
    "ptb-char": DatasetCard(
        name="ptb-char",
        description=(
            "Penn Treebank (Mikolov's RNNLM preprocessing), character level: 49 symbols, '_' between words, line breaks"
        ),
        files=(
            _ptb_file("train", "train", "e313d91425e06c4f0a8fb6e881dcce0c291f2a0e9f4dda54833069b122f91da9", 10_034_964),
            _ptb_file("val", "valid", "21661f63ec355085879458b6524644d4add5573541b4be14fb52ab2e2e995eb8", 786_084),
            _ptb_file("test", "test", "1ef5607ac3c463b16e38bfe7900dd3bfc91de5a96e0f21e7eab5188b465b8ebe", 884_846),
        ),
        split=SplitRule.by_files(),
        tokenizer="ptb-char",
        licence=(
            "WSJ text from the Penn Treebank (LDC99T42, LDC licence); Mikolov's preprocessing has no "
            "licence file of its own"
        ),
        archive=_MIKOLOV_TGZ,
        notes="simple-examples.tgz has no published checksum: its three members are checked by sha256. "
        "Bits per character are reported on the test split.",
    ),
    "enwik8": DatasetCard(
        name="enwik8",
        description="First 10^8 bytes of the 2006-03-03 English Wikipedia XML dump (Hutter Prize), byte level",
        files=(DataFile(role="text", filename="enwik8", size=100_000_000, member="enwik8"),),
        split=SplitRule.by_counts(90_000_000, 5_000_000, 5_000_000),
        tokenizer="byte",
        unit="byte",
        licence="Wikipedia text (CC BY-SA / GFDL)",
        archive=Archive(
            filename="enwik8.zip",
            urls=("http://mattmahoney.net/dc/enwik8.zip",),
            sha256="547994d9980ebed1288380d652999f38a14fe291a6247c157c3d33d4932534bc",
            size=36_445_475,
        ),
        notes="archive sha256 as recorded by Hugging Face datasets' enwik8 metadata",
    ),
    "text8": DatasetCard(
        name="text8",
        description="First 10^8 characters of Mahoney's cleaned enwik9 (a-z and space only), character level",
        files=(DataFile(role="text", filename="text8", size=100_000_000, member="text8"),),
        split=SplitRule.by_counts(90_000_000, 5_000_000, 5_000_000),
        tokenizer="char",
        licence="Wikipedia text (CC BY-SA / GFDL)",
        archive=Archive(
            filename="text8.zip",
            urls=("http://mattmahoney.net/dc/text8.zip",),
            sha256=None,
            size=31_344_016,
        ),
        notes="no published sha256: the download is checked by byte size only (31,344,016 bytes, "
        "the check of TensorFlow's word2vec tutorial) and the member by its 100,000,000 bytes",
    ),
    "wikitext-2-raw": _wikitext_card(
        "wikitext-2-raw",
        "wikitext-2-raw",
        Archive(
            filename="wikitext-2-raw-v1.zip",
            urls=(
                "https://wikitext.smerity.com/wikitext-2-raw-v1.zip",
                "https://s3.amazonaws.com/research.metamind.io/wikitext/wikitext-2-raw-v1.zip",
            ),
            sha256="ef7edb566e3e2b2d31b29c1fdb0c89a4cc683597484c3dc2517919c615435a11",
            size=4_721_645,
        ),
        "archive sha256 from MANIFEST.md; the .raw members have no published checksums of their own",
    ),
    "wikitext-103-raw": _wikitext_card(
        "wikitext-103-raw",
        "wikitext-103-raw",
        Archive(
            filename="wikitext-103-raw-v1.zip",
            urls=(
                "https://wikitext.smerity.com/wikitext-103-raw-v1.zip",
                "https://s3.amazonaws.com/research.metamind.io/wikitext/wikitext-103-raw-v1.zip",
            ),
            sha256="91c00ae287f0d699e18605c84afc9e45c192bc6b7797ff8837e5474655a33794",
            size=191_984_949,
        ),
        "not in MANIFEST.md: archive sha256 and size as quoted by public download scripts and "
        "Hugging Face datasets metadata (not verified on this machine)",
    ),
    "synthetic-salience": DatasetCard(
        name="synthetic-salience",
        description="Generated English-like text with a planted content-word fraction p and per-character ground truth",
        files=(),
        split=SplitRule("generated", counts=(90, 5, 5)),
        tokenizer="char",
        licence="generated by harness.datasets.synthetic (no third-party text)",
        synthetic=True,
        notes="parameters in the name: 'synthetic-salience:p=0.2,seed=1,n_chars=1000000' (see make_salience_corpus)",
    ),
}


def get_card(name: str) -> DatasetCard:
    """The card of ``name`` (parameters after ``:`` are ignored here); InputError listing the known names."""
    base = name.split(":", 1)[0]
    try:
        return REGISTRY[base]
    except KeyError:
        raise InputError(f"unknown dataset {name!r}; known datasets: {', '.join(REGISTRY)}") from None
