"""``harness data ...`` through the real entry point (bad input -> exit code 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main
from harness.datasets import corpus_stats_for


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(args)
    out, err = capsys.readouterr()
    return int(exc.value.code or 0), out, err


def test_list_shows_size_place_and_verification(shared_data_dir: Path, capsys) -> None:
    code, out, _ = run(["data", "list"], capsys)
    assert code == 0
    lines = {line.split()[0]: line for line in out.splitlines()[2:]}
    assert set(lines) >= {
        "tinyshakespeare",
        "ptb-char",
        "enwik8",
        "text8",
        "wikitext-2-raw",
        "wikitext-103-raw",
        "synthetic-salience",
    }
    assert "1.1 MB" in lines["tinyshakespeare"] and "sha256 ok" in lines["tinyshakespeare"]
    assert str(shared_data_dir / "tinyshakespeare" / "input.txt") in lines["tinyshakespeare"]
    assert "sha256 ok" in lines["ptb-char"] and "(3 files)" in lines["ptb-char"]
    assert "not found" in lines["enwik8"] and "36.4 MB (download)" in lines["enwik8"]


def test_stats_prints_the_statistics(shared_data_dir: Path, capsys) -> None:
    code, out, _ = run(["data", "stats", "tinyshakespeare", "--split", "val", "--json"], capsys)
    assert code == 0
    printed = json.loads(out)
    assert printed == {
        "dataset": "tinyshakespeare",
        "split": "val",
        **corpus_stats_for("tinyshakespeare", split="val").as_dict(),
    }
    code, out, _ = run(["data", "stats", "ptb-char", "--max-chars", "20000"], capsys)
    assert code == 0 and "content_letter_fraction" in out and "mean_sentence_length" in out


def test_verify_and_fetch_of_present_corpora(shared_data_dir: Path, capsys) -> None:
    code, out, _ = run(["data", "verify", "ptb-char"], capsys)
    assert code == 0 and "sha256 ok" in out
    code, out, _ = run(["data", "fetch", "tinyshakespeare"], capsys)
    assert code == 0 and "train 1,003,854, val 111,540 tokens, vocabulary 65" in out


def test_bad_input_exits_2(shared_data_dir: Path, tmp_path: Path, capsys) -> None:
    code, _, err = run(["data", "fetch", "tiny-shakespeare"], capsys)
    assert code == 2 and "known datasets: tinyshakespeare, ptb-char" in err
    code, _, err = run(["data", "stats", "nope"], capsys)
    assert code == 2 and "unknown dataset" in err
    code, _, err = run(["data", "verify", "enwik8"], capsys)
    assert code == 2 and "no copy found" in err and "enwik8.zip" in err
    (tmp_path / "tinyshakespeare").mkdir()
    (tmp_path / "tinyshakespeare" / "input.txt").write_text("not shakespeare")
    code, out, err = run(["data", "verify", "tinyshakespeare", "--data-dir", str(tmp_path)], capsys)
    assert code == 2 and "MISMATCH" in out and str(tmp_path / "tinyshakespeare" / "input.txt") in out
    assert "do not match" in err
    code, _, err = run(["data", "stats", "synthetic-salience:p=2"], capsys)
    assert code == 2 and "p must lie in (0, 1)" in err


def test_info_shows_the_card(capsys) -> None:
    code, out, _ = run(["data", "info", "text8"], capsys)
    assert code == 0
    assert "http://mattmahoney.net/dc/text8.zip" in out and "31,344,016" in out
    assert "archive sha256         not published" in out and "checksum               size" in out
    assert "consecutive blocks: 90,000,000 train, 5,000,000 val, 5,000,000 test tokens" in out
