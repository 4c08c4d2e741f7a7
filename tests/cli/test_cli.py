"""The ``relaykit`` command line, driven through Typer's CliRunner (input from ``input=``)."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from relaykit.cli._app import app
from relaykit.cli._database import default_database
from relaykit.cli._errors import CliError
from relaykit.cli._loading import load_app

HERE = Path(__file__).resolve().parent
APP = str(HERE / "chat_app.py")
EMPTY = str(HERE / "empty_app.py")


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite+aiosqlite:///{tmp_path / 'sessions.db'}"


def invoke(*args: str, input: str | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args), input=input)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def chat(db: str, text: str, *extra: str) -> tuple[str, str]:
    """Run a chat; (its output, the session id it used)."""
    code, out, err = invoke("run", APP, "--db", db, *extra, input=text)
    assert code == 0, err
    found = re.search(r"session (\w+)", out)
    assert found is not None, out
    return out, found.group(1)


def lines(out: str) -> list[str]:
    return [line.rstrip() for line in out.splitlines()]


# -- run -----------------------------------------------------------------------------------------
def test_run_shows_a_transfer_a_tool_call_and_its_result(db: str) -> None:
    out, session_id = chat(db, "Where is order 7?\nexit\n")
    assert lines(out)[2:] == [
        "you> Where is order 7?",
        "  ⇢ triage transfers to orders",
        '  → orders calls lookup_order(order_id="7")',
        '  ← lookup_order: {"order_id": "7", "status": "shipped"}',
        "orders: Order 7 has shipped.",
        "you> exit",
        f"bye — session {session_id} is stored",
    ]
    assert lines(out)[0].startswith(f"new session {session_id} (user dev, app desk;")


def test_run_continues_a_stored_session_where_it_stopped(db: str) -> None:
    _, session_id = chat(db, "Where is order 7?\n")
    out, again = chat(db, "And order 8?\n", "--session", session_id)
    assert again == session_id
    assert f"session {session_id} continues (6 stored events)" in out
    # The turn starts at orders, the agent that spoke last: no transfer this time.
    assert "transfers" not in out
    assert "orders: Order 8 has shipped." in out


def test_an_approval_is_answered_at_the_prompt(db: str) -> None:
    out, session_id = chat(db, "Refund order 9, please\nyes\n")
    assert lines(out)[2:] == [
        "you> Refund order 9, please",
        "  ⇢ triage transfers to refunds",
        '  → refunds calls issue_refund(order_id="9")',
        "⏸ refunds asks: Refund order 9?",
        "  type your answer (JSON or text) to resume; exit leaves it waiting",
        "answer> yes",
        "  ← issue_refund: refunded",
        "refunds: The refund was refunded.",
        "you>",
        f"bye — session {session_id} is stored",
    ]


def test_a_long_running_tool_gets_the_answer_as_its_result(db: str) -> None:
    out, _ = chat(db, "Ask the manager about order 3\napproved by Bo\n")
    assert lines(out)[5:10] == [
        '⏸ refunds: ask_manager started "ticket M-3" and waits for its result',
        "  type the result of ask_manager to resume; exit leaves it waiting",
        "answer> approved by Bo",
        "  ← ask_manager: approved by Bo",
        "refunds: The manager said: approved by Bo",
    ]


def test_a_pause_left_open_is_asked_again_when_the_session_continues(db: str) -> None:
    first, session_id = chat(db, "Refund order 4\nexit\n")  # the pause stays stored
    assert lines(first)[-2:] == [
        "answer> exit",
        f"bye — session {session_id} is stored; its pause waits for an answer: "
        f"relaykit run {APP} --db {db} --session {session_id}",
    ]
    out, _ = chat(db, "no\n", "--session", session_id)
    assert lines(out)[1:6] == [
        "type a message; exit or Ctrl-D ends the chat",
        "⏸ refunds asks: Refund order 4?",
        "  type your answer (JSON or text) to resume; exit leaves it waiting",
        "answer> no",
        "  ← issue_refund: declined",
    ]
    assert "refunds: The refund was declined." in out


def test_ctrl_c_at_the_prompt_ends_the_chat_and_keeps_the_session(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    typed = iter(["Where is order 7?"])

    def read(self: Console, prompt: str = "") -> str:
        self.print(prompt, end="")
        line = next(typed, None)
        if line is None:
            raise KeyboardInterrupt
        return line

    monkeypatch.setattr(Console, "input", read)
    out, session_id = chat(db, "")
    assert lines(out)[-3:] == [
        "orders: Order 7 has shipped.",
        "you>",
        f"bye — session {session_id} is stored",
    ]


def test_an_unknown_session_is_an_error(db: str) -> None:
    code, _, err = invoke("run", APP, "--db", db, "--session", "nope", input="hi\n")
    assert code == 1
    assert "no session 'nope' of user 'dev' in app 'desk'" in err


def test_an_attribute_names_another_agent(db: str) -> None:
    code, out, _ = invoke("run", f"{APP}:solo", "--db", db, "--user", "bo", input="hi\n")
    assert code == 0
    assert "solo: Hello!" in out
    assert "(user bo, app desk;" in out


# -- tree ----------------------------------------------------------------------------------------
def test_tree_draws_agents_and_tools() -> None:
    code, out, _ = invoke("tree", APP)
    assert code == 0
    assert lines(out)[:3] == [
        "triage (ChatModelAgent) — Routes customers.",
        "├── orders (ChatModelAgent) — Answers order questions.",
        "│   └── lookup_order (tool) — Look up an order.",
    ]
    assert "└── refunds (ChatModelAgent) — Handles refunds." in out
    assert "ask_manager (tool)" in out


def test_tree_of_a_module_and_a_factory() -> None:
    code, out, _ = invoke("tree", "examples.support_desk:build_desk")
    assert code == 0
    assert "request_refund (tool)" in out


# -- sessions ------------------------------------------------------------------------------------
def test_sessions_list_show_delete(db: str) -> None:
    _, first = chat(db, "Where is order 7?\n")
    _, second = chat(db, "Refund order 9\nyes\n")

    code, out, _ = invoke("sessions", "list", APP, "--db", db)
    assert code == 0
    rows = {m[0]: int(m[1]) for m in re.findall(r"│ (\w{12}) │ [\d\- :]+ │\s+(\d+) │", out)}
    assert rows == {first: 6, second: 7}

    code, out, _ = invoke("sessions", "show", APP, second, "--db", db)
    assert code == 0
    assert lines(out)[1:] == [
        "you: Refund order 9",
        "  ⇢ triage transfers to refunds",
        '  → refunds calls issue_refund(order_id="9")',
        "⏸ refunds asks: Refund order 9?",
        "  ← issue_refund: refunded",
        "refunds: The refund was refunded.",
        "state",
        "{}",
    ]

    code, out, _ = invoke("sessions", "delete", APP, first, "--db", db)
    assert (code, out.strip()) == (0, f"deleted session {first}")
    code, out, _ = invoke("sessions", "list", APP, "--db", db)
    assert first not in out and second in out
    code, _, err = invoke("sessions", "delete", APP, first, "--db", db)
    assert code == 1 and f"no session '{first}'" in err

    code, out, _ = invoke("sessions", "list", APP, "--db", db, "--user", "nobody")
    assert (code, out.strip()) == (0, "no sessions of user nobody in app desk")


def test_sessions_show_says_when_a_pause_waits(db: str) -> None:
    _, session_id = chat(db, "Refund order 4\n")
    code, out, _ = invoke("sessions", "show", APP, session_id, "--db", db)
    assert code == 0
    assert "paused: an invocation waits for an answer" in out


# -- errors --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["tree", "no/such/app.py"], 2, "no app file or folder no/such/app.py"),
        (["tree", "no/such/app"], 2, "no app file or folder no/such/app (nor no/such/app.py)"),
        (["tree", EMPTY], 2, "has no 'root_agent'"),
        (["tree", f"{APP}:missing"], 2, "has no 'missing'"),
        (["tree", "relaykit_no_such_module"], 2, "no module named 'relaykit_no_such_module'"),
        (["run", APP, "--model", "mistral:large"], 2, "unknown provider 'mistral'"),
        (["run", APP, "--model", "gpt-4o"], 2, "should look like '<provider>:<model>'"),
        (["run", f"{APP}:solo", "--model", "openai:gpt-4o"], 2, "--model needs the app to"),
        (["run", APP, "--db", "foo://x"], 2, "scheme 'foo' are not supported"),
        (
            ["sessions", "list", APP, "--db", "sqlite+aiosqlite:////no/such/folder/s.db"],
            1,
            "cannot open the session database",
        ),
    ],
)
def test_errors_are_one_line_with_their_exit_code(
    args: list[str], code: int, message: str, db: str
) -> None:
    if "--db" not in args and args[0] != "tree":
        args = [*args, "--db", db]
    got, out, err = invoke(*args, input="")
    assert got == code, (out, err)
    assert message in err
    assert err.startswith("relaykit: error: ")
    assert "Traceback" not in err + out


def test_help_everywhere() -> None:
    for args in (
        [],
        ["run"],
        ["tree"],
        ["sessions"],
        ["sessions", "list"],
        ["sessions", "show"],
        ["sessions", "delete"],
        ["web"],
        ["api"],
    ):
        code, out, _ = invoke(*args, "--help")
        assert code == 0, args
        assert "Usage: relaykit" in out


def test_help_texts_flow_as_paragraphs() -> None:
    # A docstring's line breaks are not kept: on a wide terminal a paragraph is one line.
    wide = {"COLUMNS": "200", "TERMINAL_WIDTH": "200"}
    result = CliRunner().invoke(app, ["run", "--help"], env=wide)
    assert result.exit_code == 0
    assert (
        "Each event is shown as it comes: who speaks, transfers, tool calls and results, "
        "a reply's tokens as they stream, a spinner" in result.stdout
    )
    assert "default: .relaykit/sessions.db in the app's" in result.stdout  # not HTML-like


def test_a_missing_argument_is_a_usage_error() -> None:
    code, _, _ = invoke("run")
    assert code == 2


def test_serving_needs_relaykit_server(db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "relaykit.server", None)  # import fails
    code, _, err = invoke("api", APP, "--db", db)
    assert code == 1
    assert "relaykit.server" in err


@pytest.mark.parametrize("command", ["web", "api"])
def test_a_port_in_use_is_one_line_and_exit_code_1(command: str, db: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, out, err = invoke(command, APP, "--db", db, "--port", str(port))
    assert code == 1, (out, err)
    assert f"relaykit: error: cannot listen on 127.0.0.1:{port}:" in err
    assert "Traceback" not in err
    assert "http://" not in out  # no address is announced for a server that did not start


def test_a_host_that_does_not_resolve_is_one_line(db: str) -> None:
    code, _, err = invoke("api", APP, "--db", db, "--host", "no-such-host.invalid", "--port", "0")
    assert code == 1
    assert "relaykit: error: cannot listen on no-such-host.invalid:0:" in err


# -- loading -------------------------------------------------------------------------------------
def test_the_default_database_sits_next_to_the_app() -> None:
    loaded = load_app(APP)
    assert default_database(loaded) == f"sqlite+aiosqlite:///{HERE / '.relaykit' / 'sessions.db'}"
    assert loaded.app_name == "desk" and loaded.make_runner is not None
    assert load_app(f"{APP}:solo").make_runner is None


def test_a_package_folder_is_an_app(tmp_path: Path) -> None:
    package = tmp_path / "shopapp"
    package.mkdir()
    (package / "__init__.py").write_text(
        "import relaykit as rk\n"
        "root_agent = rk.ChatModelAgent('shop', 'A shop.', 'Sell.', "
        "model=rk.ScriptedModel([]))\n"
    )
    loaded = load_app(str(package))
    assert loaded.agent.name == "shop"
    assert loaded.folder == package
    with pytest.raises(CliError, match=r"no __init__\.py .* and no agent\.py"):
        load_app(str(tmp_path))


def test_the_console_script_runs() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "relaykit.cli", "tree", APP],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("triage (ChatModelAgent)")


def test_importing_relaykit_does_not_import_the_cli() -> None:
    code = "import sys, relaykit; print('typer' in sys.modules, 'rich' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False False"


def test_a_port_out_of_range_is_a_usage_error(db: str) -> None:
    code, out, err = invoke("api", APP, "--db", db, "--port", "99999")
    assert code == 2
    assert "Traceback" not in out + err


def test_make_runner_must_keep_sessions_in_the_given_service(tmp_path: Path, db: str) -> None:
    app_file = tmp_path / "own_store.py"
    app_file.write_text(
        "import relaykit as rk\n"
        "root_agent = rk.ChatModelAgent('a', model=rk.ScriptedModel([]))\n"
        "def make_runner(*, session_service, model=None):\n"
        "    return rk.Runner(root_agent, session_service=rk.InMemorySessionService())\n",
        encoding="utf-8",
    )
    code, out, err = invoke("run", str(app_file), "--db", db, input="hi\n")
    assert code == 1
    assert "does not keep its sessions in the session_service it was given" in err
    assert "Traceback" not in out + err


def test_the_sessions_commands_create_no_database(tmp_path: Path) -> None:
    # A mistyped --db is not created as an empty database: list says there is none yet,
    # show and delete say why the session is not there.
    typo = tmp_path / "sesions.db"
    code, out, err = invoke("sessions", "list", APP, "--db", str(typo))
    assert code == 0, err
    assert f"no sessions of user dev in app desk (no session database at {typo})" in out
    for command in ("show", "delete"):
        code, _, err = invoke("sessions", command, APP, "s1", "--db", str(typo))
        assert code == 1
        assert f"no session 's1' of user 'dev' in app 'desk': no session database at {typo}" in (
            " ".join(err.split())
        )
    assert not typo.exists()


def test_a_host_with_ipv4_and_ipv6_addresses_is_served_on_ipv4(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from relaykit.cli._app import _listen

    resolve = socket.getaddrinfo

    def both(host: str, port: int, *args: Any, **kwargs: Any) -> list[Any]:
        assert host == "localhost"
        return [
            *resolve("::1", port, *args, **kwargs),
            *resolve("127.0.0.1", port, *args, **kwargs),
        ]

    monkeypatch.setattr(socket, "getaddrinfo", both)
    try:
        listener = _listen("localhost", 0)
    except CliError:  # a machine without IPv6 cannot resolve ::1: nothing to choose then
        pytest.skip("no IPv6 here")
    with listener:
        assert listener.family == socket.AF_INET
        assert listener.getsockname()[0] == "127.0.0.1"
