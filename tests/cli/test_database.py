"""``--db``: where sessions are kept, and a database that cannot be opened."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from relaykit.cli._app import app
from relaykit.cli._database import database_url
from relaykit.sessions.database import DatabaseSessionService

HERE = Path(__file__).resolve().parent
APP = str(HERE / "chat_app.py")


def invoke(*args: str, input: str | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args), input=input)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def test_a_file_path_is_a_sqlite_database(tmp_path: Path) -> None:
    db = tmp_path / "chats.db"
    code, out, _ = invoke("run", APP, "--db", str(db), input="Where is order 7?\n")
    assert code == 0
    assert db.is_file()
    code, out, _ = invoke("sessions", "list", APP, "--db", f"sqlite:///{db}")
    assert code == 0 and "│      6 │" in out  # sqlite:// means relaykit's aiosqlite driver


def test_short_schemes_get_the_asyncio_drivers() -> None:
    assert database_url("sqlite:///a.db") == "sqlite+aiosqlite:///a.db"
    assert database_url("postgres://u@h/d") == "postgresql+asyncpg://u@h/d"
    assert database_url("postgresql+asyncpg://u@h/d") == "postgresql+asyncpg://u@h/d"


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: p / "no" / "such" / "s.db", "the folder {p}/no/such does not exist"),
        (lambda p: p, "it is a folder"),
        (
            lambda p: _write(p / "notes.db", b"these are my notes, not a database" * 10),
            "file is not a database",
        ),
    ],
    ids=["missing-folder", "a-folder", "not-a-database"],
)
def test_a_database_that_cannot_be_opened_is_one_line(
    tmp_path: Path, make: object, message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = make(tmp_path)  # type: ignore[operator]
    opened: list[str] = []

    async def open_(self: DatabaseSessionService) -> None:
        opened.append(self.url)

    monkeypatch.setattr(DatabaseSessionService, "open", open_)
    for args in (["run", APP], ["sessions", "list", APP]):
        code, out, err = invoke(*args, "--db", str(path), input="hi\n")
        assert code == 1, (out, err)
        assert err.startswith(f"relaykit: error: cannot open the session database {path}: ")
        assert message.format(p=tmp_path) in err
        assert "Traceback" not in out + err
    # Refused before aiosqlite tried the file: a connect that fails inside aiosqlite leaves
    # its thread to report to the closed event loop ("Event loop is closed") afterwards.
    assert opened == []


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_an_unreachable_postgresql_is_one_line_without_the_password() -> None:
    url = "postgresql+asyncpg://bo:s3cret@127.0.0.1:1/shop"
    code, out, err = invoke("sessions", "list", APP, "--db", url)
    assert code == 1
    assert err.startswith(
        "relaykit: error: cannot open the session database "
        "postgresql+asyncpg://bo:***@127.0.0.1:1/shop: "
    )
    assert "s3cret" not in out + err and "Traceback" not in out + err


def test_a_bad_model_is_refused_before_the_database_is_created(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    code, _, err = invoke("run", APP, "--db", str(db), "--model", "mistral:large")
    assert code == 2
    assert "unknown provider 'mistral'" in err
    assert not db.exists()
