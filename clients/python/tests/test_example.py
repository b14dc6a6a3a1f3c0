"""The example runs: offline, against the real server, with answers typed at its prompt."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest

from .support.service import Service

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "approve_on_terminal.py"


def example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("approve_on_terminal", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def typed(*answers: str) -> Callable[[str], str]:
    """The terminal: each prompt gets the next answer."""
    left: Iterator[str] = iter(answers)
    return lambda prompt: next(left)


def test_an_edit_typed_at_the_prompt_is_what_runs(
    service: Service, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "README.md").write_text("hello")
    ask = typed("maybe", "e", "{not json", "e", '{"path": "NOTES.md", "content": "edited"}')
    code = example().main(
        ["Add a changelog", "--url", service.url, "--folder", str(tmp_path), "--offline"], ask
    )
    assert code == 0
    assert (tmp_path / "NOTES.md").read_text() == "edited"
    assert not (tmp_path / "CHANGELOG.md").exists()
    out = capsys.readouterr().out
    assert "The model wants to run write_file(" in out and "not JSON" in out
    assert "[list_files] README.md" in out


def test_a_refusal_typed_at_the_prompt_reaches_the_model(
    service: Service, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = example().main(
        ["Add a changelog", "--url", service.url, "--folder", str(tmp_path), "--offline"],
        typed("n", "not today"),
    )
    assert code == 0
    assert list(tmp_path.iterdir()) == []
    assert "[write_file] error: The user denied this call: not today" in capsys.readouterr().out
