"""The app convention: what ``APP`` may name, and what the CLI takes from the module."""

from __future__ import annotations

import re
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from relaykit.cli._app import app
from relaykit.cli._errors import CliError
from relaykit.cli._loading import load_app

ROOT = Path(__file__).resolve().parents[2]

AGENT = """\
import relaykit as rk
from relaykit import Message

root_agent = rk.ChatModelAgent(
    "{name}", "Says hello.", "Greet.",
    model=rk.ScriptedModel([lambda r: Message.assistant("{reply}")] * 50),
)
"""


def invoke(*args: str, input: str | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args), input=input)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


@pytest.fixture
def db(tmp_path: Path) -> str:
    return str(tmp_path / "sessions.db")


@pytest.fixture(autouse=True)
def _forget_the_apps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The modules a test imported from its folder are forgotten, and sys.path restored."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield
    for name, module in list(sys.modules.items()):
        if str(getattr(module, "__file__", None) or "").startswith(str(tmp_path)):
            del sys.modules[name]


# -- the examples are apps -------------------------------------------------------------------
@pytest.mark.parametrize(
    ("spec", "root", "name"),
    [
        ("examples/support_desk", "triage", "desk"),
        ("examples/support_desk.py", "triage", "desk"),
        ("examples.support_desk", "triage", "desk"),
        ("examples/research_pipeline", "pipeline", "research"),
        ("examples/agent_tool", "lead", "lead"),
    ],
)
def test_each_example_is_an_app(
    spec: str, root: str, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    loaded = load_app(spec)
    assert (loaded.agent.name, loaded.app_name) == (root, name)
    assert loaded.folder == ROOT / "examples"


def test_tree_draws_each_example(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    code, out, _ = invoke("tree", "examples/support_desk")
    assert code == 0
    assert out.startswith("triage (ChatModelAgent)")
    assert "request_refund (tool)" in out
    code, out, _ = invoke("tree", "examples/research_pipeline")
    assert code == 0
    assert [line.split(" — ")[0] for line in out.splitlines() if " — " in line] == [
        "pipeline (SequentialAgent)",
        "├── gather (ParallelAgent)",
        "│   ├── web_researcher (ChatModelAgent)",
        "│   │   └── search_web (tool)",
        "│   └── paper_researcher (ChatModelAgent)",
        "│       └── search_papers (tool)",
        "├── refine (LoopAgent)",
        "│   ├── writer (ChatModelAgent)",
        "│   └── critic (ChatModelAgent)",
        "│       └── exit_loop (tool)",
        "└── editor (ChatModelAgent)",
    ]
    code, out, _ = invoke("tree", "examples/agent_tool")
    assert code == 0
    assert out.splitlines() == [
        "lead (ChatModelAgent) — Writes answers.",
        "└── researcher (agent tool) — Finds facts about a topic.",
        "    └── researcher (ChatModelAgent) — Finds facts about a topic.",
    ]


def test_the_support_desk_without_py_pauses_and_the_typed_answer_resumes_it(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    typed = "Where is my order 1234?\nI want a refund.\napproved by Bo\n"
    code, out, err = invoke("run", "examples/support_desk", "--db", db, input=typed)
    assert code == 0, err
    assert "orders: Order 1234 has shipped with DHL; it arrives Thursday." in out
    assert "answer> approved by Bo" in out
    assert "refunds: Good news: Bo approved your refund of €59.90 for order 1234." in out


def test_the_agent_tool_app_answers_through_its_researcher(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    code, out, _ = invoke("run", "examples/agent_tool", "--db", db, input="Everest?\nNile?\n")
    assert code == 0
    assert [line for line in out.splitlines() if line.startswith("lead:")] == [
        "lead: Answer, from research: Fact: Mount Everest is 8,849 m high.",
        "lead: Answer, from research: Fact: the Nile is about 6,650 km long.",
    ]


def test_the_research_pipeline_app_runs_its_workflow(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    code, out, _ = invoke("run", "examples/research_pipeline", "--db", db, input="RAG?\n")
    assert code == 0
    speakers = [m.group(1) for m in re.finditer(r"^(\w+): ", out, re.M)]
    assert sorted(speakers[:2]) == ["paper_researcher", "web_researcher"]
    assert speakers[2:] == ["writer", "critic", "writer", "editor"]
    assert "→ critic calls exit_loop()" in out


# -- files, folders, module names ------------------------------------------------------------
def test_an_attribute_after_a_path_picks_that_agent(tmp_path: Path, db: str) -> None:
    app_file = write(
        tmp_path / "app.py",
        AGENT.format(name="main", reply="main here")
        + "agent = rk.ChatModelAgent('other', model=rk.ScriptedModel("
        "[Message.assistant('other here')]))\n",
    )
    code, out, _ = invoke("run", f"{app_file}:agent", "--db", db, input="hi\n")
    assert code == 0
    assert "other: other here" in out


def test_a_file_name_that_is_no_module_name_loads(tmp_path: Path, db: str) -> None:
    app_file = write(tmp_path / "my-app.py", AGENT.format(name="hyphen", reply="Hi from my-app"))
    code, out, err = invoke("run", str(app_file), "--db", db, input="hi\n")
    assert code == 0, err
    assert "(user dev, app my-app;" in out
    assert "hyphen: Hi from my-app" in out
    assert load_app(str(tmp_path / "my-app")).agent.name == "hyphen"  # .py may be left out


def test_a_hyphenated_file_in_a_package_keeps_its_relative_imports(tmp_path: Path) -> None:
    write(tmp_path / "shop" / "__init__.py", "")
    write(tmp_path / "shop" / "replies.py", "GREETING = 'Welcome to the shop'\n")
    write(
        tmp_path / "shop" / "front-desk.py",
        """\
        import relaykit as rk
        from relaykit import Message

        from . import replies
        from .replies import GREETING

        root_agent = rk.ChatModelAgent(
            "desk", model=rk.ScriptedModel([Message.assistant(replies.GREETING)])
        )
        """,
    )
    loaded = load_app(str(tmp_path / "shop" / "front-desk.py"))
    assert loaded.module.__name__ == "shop.front-desk"
    assert sys.modules["shop.front-desk"] is loaded.module
    assert loaded.module.GREETING == "Welcome to the shop"
    assert (loaded.app_name, loaded.folder) == ("front-desk", tmp_path / "shop")


def test_a_file_inside_packages_is_imported_by_its_dotted_name(tmp_path: Path) -> None:
    write(tmp_path / "company" / "__init__.py", "")
    write(tmp_path / "company" / "apps" / "__init__.py", "")
    write(tmp_path / "company" / "apps" / "shared.py", "NAME = 'bot'\n")
    write(
        tmp_path / "company" / "apps" / "bot.py",
        "from .shared import NAME\n" + AGENT.format(name="bot", reply="hi"),
    )
    loaded = load_app(str(tmp_path / "company" / "apps" / "bot.py"))
    assert loaded.module.__name__ == "company.apps.bot"
    assert loaded.module.NAME == "bot"


def test_two_app_files_of_one_name_are_two_apps(tmp_path: Path) -> None:
    first = write(tmp_path / "a" / "app.py", AGENT.format(name="first", reply="1"))
    second = write(tmp_path / "b" / "app.py", AGENT.format(name="second", reply="2"))
    assert load_app(str(first)).agent.name == "first"
    assert load_app(str(second)).agent.name == "second"
    assert load_app(str(first)).agent.name == "first"  # loaded once, found again


def test_a_folder_in_the_adk_layout_is_an_app(tmp_path: Path) -> None:
    # A package whose __init__.py imports its agent module ...
    write(tmp_path / "weather_app" / "__init__.py", "from . import agent\n")
    write(tmp_path / "weather_app" / "agent.py", AGENT.format(name="weather", reply="sunny"))
    loaded = load_app(str(tmp_path / "weather_app"))
    assert (loaded.agent.name, loaded.app_name) == ("weather", "weather_app")
    assert loaded.folder == tmp_path / "weather_app"
    # ... and a plain folder holding agent.py.
    write(tmp_path / "rain-app" / "agent.py", AGENT.format(name="rain", reply="wet"))
    loaded = load_app(str(tmp_path / "rain-app"))
    assert (loaded.agent.name, loaded.app_name) == ("rain", "rain-app")
    assert loaded.folder == tmp_path / "rain-app"


def test_a_package_with_a_hyphenated_name_loads_with_its_submodules(tmp_path: Path) -> None:
    write(tmp_path / "my-bot" / "__init__.py", "from .agent import root_agent\n")
    write(tmp_path / "my-bot" / "agent.py", AGENT.format(name="bot", reply="hi"))
    loaded = load_app(str(tmp_path / "my-bot"))
    assert (loaded.agent.name, loaded.app_name) == ("bot", "my-bot")


@pytest.mark.parametrize(
    ("files", "spec", "message"),
    [
        ({"notes.txt": "hello"}, "notes.txt", r"is not a Python file \(\.py\)"),
        ({"broken.py": "import no_such_module_here\n"}, "broken.py", "importing .* failed"),
        ({"bad-name.py": "raise RuntimeError('boom')\n"}, "bad-name.py", "RuntimeError: boom"),
        (
            {"two.py": "root_agent = 2\n"},
            "two.py",
            "'root_agent' of two is of type int, not an agent",
        ),
    ],
)
def test_an_app_that_cannot_load_is_one_line(
    tmp_path: Path, files: dict[str, str], spec: str, message: str
) -> None:
    for name, text in files.items():
        write(tmp_path / name, text)
    with pytest.raises(CliError, match=message):
        load_app(str(tmp_path / spec))
    code, out, err = invoke("tree", str(tmp_path / spec))
    assert code in (1, 2)
    assert err.startswith("relaykit: error: ") and "Traceback" not in out + err


# -- runner_config and make_runner ----------------------------------------------------------
def test_runner_config_gives_the_runner_its_options(tmp_path: Path, db: str) -> None:
    app_file = write(
        tmp_path / "configured.py",
        AGENT.format(name="greeter", reply="Hello there")
        + textwrap.dedent(
            """\

            class Stamp(rk.Plugin):
                async def after_run(self, ctx):
                    print("plugin: the run ended")

            runner_config = {"app_name": "greetings", "plugins": [Stamp()], "streaming": False}
            """
        ),
    )
    code, out, err = invoke("run", str(app_file), "--db", db, input="hi\n")
    assert code == 0, err
    assert "(user dev, app greetings;" in out
    assert "greeter: Hello there" in out
    assert "plugin: the run ended" in out


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ("{'colour': 'red'}", "has 'colour', which is no Runner argument; it takes app_name"),
        ("{'session_service': None}", "sets 'session_service', which the CLI passes itself"),
        ("['plugins']", "must be a dict of Runner keyword arguments, not a list"),
    ],
)
def test_a_bad_runner_config_is_a_usage_error(
    tmp_path: Path, db: str, config: str, message: str
) -> None:
    app_file = write(
        tmp_path / "configured.py",
        AGENT.format(name="a", reply="b") + f"runner_config = {config}\n",
    )
    code, out, err = invoke("run", str(app_file), "--db", db, input="hi\n")
    assert code == 2
    assert message in err and "Traceback" not in out + err


def test_make_runner_may_take_settings_as_keywords(tmp_path: Path, db: str) -> None:
    app_file = write(
        tmp_path / "settings.py",
        AGENT.format(name="a", reply="b")
        + textwrap.dedent(
            """\
            def make_runner(**settings):
                print("model:", settings["model"])
                return rk.Runner(root_agent, app_name="s",
                                 session_service=settings["session_service"])
            """
        ),
    )
    code, out, err = invoke("run", str(app_file), "--db", db, "--model", "openai:x", input="")
    assert code == 0, err
    assert "model: openai:x" in out


def test_model_for_a_make_runner_without_a_model_argument_is_a_usage_error(
    tmp_path: Path, db: str
) -> None:
    app_file = write(
        tmp_path / "fixed.py",
        AGENT.format(name="a", reply="b") + "def make_runner(*, session_service):\n"
        "    return rk.Runner(root_agent, session_service=session_service)\n",
    )
    code, _, err = invoke("run", str(app_file), "--db", db, input="hi\n")
    assert code == 0, err  # without --model, make_runner gets what it takes
    code, _, err = invoke("run", str(app_file), "--db", db, "--model", "openai:gpt-4o")
    assert code == 2
    assert "make_runner of fixed takes no model argument" in err


def test_the_support_desk_asks_for_the_order_number_and_answers_an_unknown_order(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A first message without an order number, then an order that does not exist: the
    # desk answers both (its scripted models used to fail parsing the tool's error).
    monkeypatch.chdir(ROOT)
    typed = "hello\n1234\nmy order 999 is late\nI want a refund\n"
    code, out, err = invoke("run", "examples/support_desk", "--db", db, input=typed)
    assert code == 0, err
    assert "✗" not in out, out
    assert "orders: Which order is it? Please give me its number." in out
    assert "orders: Order 1234 has shipped with DHL; it arrives Thursday." in out
    assert "orders: I could not find order 999: no order 999." in out
    assert "refunds: I could not find order 999: no order 999." in out


def test_tree_shows_a_tool_description_whose_first_sentence_wraps(tmp_path: Path) -> None:
    app_file = write(
        tmp_path / "wrapping.py",
        '''\
        import relaykit as rk

        @rk.tool
        def refund(order_id: str) -> str:
            """Ask a manager to approve
            a refund.

            Args:
                order_id: the order
            """
            return "asked"

        root_agent = rk.ChatModelAgent("desk", "Helps.", model=rk.ScriptedModel([]),
                                       tools=[refund])
        ''',
    )
    code, out, err = invoke("tree", str(app_file))
    assert code == 0, err
    assert "└── refund (tool) — Ask a manager to approve a refund." in out.splitlines()


def test_an_empty_line_at_the_answer_prompt_is_no_answer(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An Enter pressed by mistake must not resume the pause (the desk reads an empty result
    # as an approval): the prompt asks again.
    monkeypatch.chdir(ROOT)
    typed = "Where is my order 1234?\nI want a refund.\n\n  \nno\n"
    code, out, err = invoke("run", "examples/support_desk", "--db", db, input=typed)
    assert code == 0, err
    assert "refunds: Sorry: the manager declined the refund." in out
    assert "approved your refund" not in out
