"""Tools served by an MCP (Model Context Protocol) server, through the official ``mcp`` SDK.

An :class:`MCPToolset` owns one client session with one server, over stdio (a subprocess) or
streamable HTTP; its :meth:`~MCPToolset.list_tools` returns :class:`MCPTool` objects that
implement relaykit's ``Tool`` protocol and can be handed to an agent like any other tool::

    async with MCPToolset.stdio("python", ["server.py"]) as toolset:
        tools = await toolset.list_tools()
        ...  # run agents with ``tools`` while the toolset is open

Needs the optional dependency: ``pip install 'relaykit[mcp]'`` (``mcp`` 2.x). ``mcp`` is only
imported when a toolset is built, never by ``import relaykit``.
"""

from __future__ import annotations

import copy
import logging
import os
import re
import sys
from collections.abc import AsyncIterator, Callable, Collection, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self, TextIO

from relaykit.errors import ConfigurationError, ToolError
from relaykit.models.base import ToolSpec
from relaykit.tools.base import ToolContext

if TYPE_CHECKING:
    from mcp import ClientSession
    from mcp.types import CallToolResult, ContentBlock
    from mcp.types import Tool as MCPToolDefinition

__all__ = ["MCPTool", "MCPToolset", "TransportFactory"]

logger = logging.getLogger(__name__)

TransportStreams = tuple[Any, Any]
"""The ``(read_stream, write_stream)`` pair an MCP client transport yields. ``Any``: the
stream types are the SDK's own and vary with its version; they only go from the transport
to the SDK's ``ClientSession``."""

TransportFactory = Callable[[], AbstractAsyncContextManager[TransportStreams]]
"""A zero-argument callable returning an SDK transport context (``stdio_client(...)`` etc.)."""

_INSTALL_HINT = "pip install 'relaykit[mcp]'"
_HTTP_TIMEOUT = 30.0  # seconds: connect, write, pool (the SDK's defaults)
_HTTP_SSE_READ_TIMEOUT = 300.0  # seconds: a server may hold a response stream open


def _require_mcp() -> None:
    """Raise ConfigurationError unless a usable ``mcp`` (2.x) is installed."""
    try:
        import mcp  # noqa: F401
    except ImportError as exc:
        raise ConfigurationError(
            f"MCP tools need the 'mcp' package, which is not installed: {_INSTALL_HINT}"
        ) from exc
    from importlib.metadata import PackageNotFoundError, version

    try:
        installed = version("mcp")
    except PackageNotFoundError:  # vendored or unusual install: trust it
        return
    major = installed.split(".", 1)[0]
    if major.isdigit() and int(major) < 2:
        raise ConfigurationError(
            f"MCP tools need mcp>=2, but mcp {installed} is installed: "
            f"pip install -U 'mcp>=2' (or {_INSTALL_HINT})"
        )


_UNSAFE_NAME_CHARS = re.compile(r"[^a-zA-Z0-9_-]")


def model_safe_name(name: str) -> str:
    """A tool name every provider accepts (``^[a-zA-Z0-9_-]{1,64}$``): other characters become
    ``_``; the server is still called with its own name.

    >>> model_safe_name("fs.read file")
    'fs_read_file'
    """
    safe = _UNSAFE_NAME_CHARS.sub("_", name)[:64]
    return safe or "_"


class MCPToolset:
    """One connection to an MCP server whose tools become relaykit tools.

    Build it with :meth:`stdio` or :meth:`http` (or pass any SDK transport factory), then use it
    as an async context manager: entering starts the transport and runs the MCP handshake,
    leaving closes the session and the transport (the stdio server process is stopped). Enter
    and leave it in the same task, as the SDK's transports require. The tools it lists stay
    bound to the toolset and work only while it is open.

    ``tool_filter`` keeps only the named server tools; ``name_prefix`` is put in front of every
    tool name the model sees (the server is still called with its own name), which keeps tools
    of several servers apart. ``timeout`` bounds the wait, in seconds, for each MCP response.

    Example::

        github = MCPToolset.http("https://mcp.example.com/mcp",
                                 headers={"Authorization": f"Bearer {token}"},
                                 tool_filter={"search_issues"}, name_prefix="github_")
        async with github:
            tools = await github.list_tools()   # [MCPTool('github_search_issues')]

    Args:
        transport: makes the SDK transport context to connect through (``stdio`` and
            ``http`` build one).
        tool_filter: the server tools to keep, by their server names; all by default.
        name_prefix: put in front of every tool name the model sees.
        timeout: seconds to wait for each MCP response; the SDK's default by default.
        description: how messages name the connection.
    """

    def __init__(
        self,
        transport: TransportFactory,
        *,
        tool_filter: Collection[str] | None = None,
        name_prefix: str = "",
        timeout: float | None = None,
        description: str = "custom transport",
    ) -> None:
        _require_mcp()
        self._transport = transport
        self._tool_filter = None if tool_filter is None else frozenset(tool_filter)
        self._name_prefix = name_prefix
        self._timeout = timeout
        self._description = description
        self._stack: AsyncExitStack | None = None
        self._session: ClientSession | None = None

    @classmethod
    def stdio(
        cls,
        command: str,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        *,
        errlog: TextIO | None = None,
        tool_filter: Collection[str] | None = None,
        name_prefix: str = "",
        timeout: float | None = None,
    ) -> MCPToolset:
        """A toolset whose server is the subprocess ``command *args``, spoken to over stdio.

        ``env`` is added to the few variables the SDK passes on by default (PATH, HOME, ...);
        the server's stderr goes to ``errlog`` (default: ``sys.stderr`` at connect time).

        Example::

            async with MCPToolset.stdio(sys.executable, ["my_server.py"]) as toolset:
                tools = await toolset.list_tools()
        """
        _require_mcp()
        from mcp.client.stdio import StdioServerParameters, stdio_client

        if isinstance(args, str):
            raise ConfigurationError(
                f"MCPToolset.stdio args must be a sequence of strings, not the string {args!r}"
            )
        params = StdioServerParameters(
            command=command,
            args=list(args),
            env=None if env is None else dict(env),
            cwd=None if cwd is None else Path(cwd),
        )

        def transport() -> AbstractAsyncContextManager[TransportStreams]:
            return stdio_client(params, errlog=sys.stderr if errlog is None else errlog)

        return cls(
            transport,
            tool_filter=tool_filter,
            name_prefix=name_prefix,
            timeout=timeout,
            description=f"stdio {' '.join([command, *args])!r}",
        )

    @classmethod
    def http(
        cls,
        url: str,
        headers: Mapping[str, str] | None = None,
        *,
        tool_filter: Collection[str] | None = None,
        name_prefix: str = "",
        timeout: float | None = None,
    ) -> MCPToolset:
        """A toolset speaking streamable HTTP to the server endpoint ``url``.

        ``headers`` (authorization, for one) are sent with every request.

        Example::

            async with MCPToolset.http("http://127.0.0.1:8000/mcp") as toolset:
                tools = await toolset.list_tools()
        """
        _require_mcp()
        header_dict = None if headers is None else dict(headers)

        def transport() -> AbstractAsyncContextManager[TransportStreams]:
            return _streamable_http(url, header_dict)

        return cls(
            transport,
            tool_filter=tool_filter,
            name_prefix=name_prefix,
            timeout=timeout,
            description=f"http {url!r}",
        )

    # -- lifecycle -------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        await self.connect()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        stack, self._stack, self._session = self._stack, None, None
        if stack is None:
            return None
        try:
            return await stack.__aexit__(exc_type, exc, tb)
        except BaseException as exit_exc:
            if exc is not None and _sole_leaf(exit_exc) is exc:
                return False  # the SDK's task groups wrapped the body's error: raise it unwrapped
            raise

    async def connect(self) -> None:
        """Start the transport and the MCP session (what ``async with`` does on entry)."""
        if self._stack is not None:
            raise ConfigurationError(f"MCP toolset ({self._description}) is already open")
        from mcp import ClientSession

        try:
            async with AsyncExitStack() as stack:
                read_stream, write_stream = await stack.enter_async_context(self._transport())
                session = await stack.enter_async_context(
                    ClientSession(read_stream, write_stream, read_timeout_seconds=self._timeout)
                )
                await session.initialize()
                self._stack, self._session = stack.pop_all(), session
        except BaseException as exc:
            leaf = _sole_leaf(exc)
            if leaf is not exc and isinstance(leaf, Exception):
                raise leaf from None  # e.g. ConnectError, not "unhandled errors in a TaskGroup"
            raise

    async def aclose(self) -> None:
        """Close the session and the transport (what ``async with`` does on exit). Idempotent."""
        await self.__aexit__(None, None, None)

    @property
    def is_open(self) -> bool:
        """Whether the session is connected."""
        return self._session is not None

    @property
    def session(self) -> ClientSession:
        """The SDK ``ClientSession`` (for resources, prompts, ...); only while open."""
        if self._session is None:
            raise ConfigurationError(
                f"MCP toolset ({self._description}) is not open: use it as "
                "'async with toolset:' (or await toolset.connect()) before listing or calling tools"
            )
        return self._session

    # -- tools -----------------------------------------------------------------------------

    async def list_tools(self) -> list[MCPTool]:
        """The server's tools (all pages, after ``tool_filter``) as relaykit tools."""
        from mcp.types import PaginatedRequestParams

        session = self.session
        definitions: list[MCPToolDefinition] = []
        cursor: str | None = None
        seen_cursors: set[str] = set()
        while True:
            params = None if cursor is None else PaginatedRequestParams(cursor=cursor)
            result = await session.list_tools(params=params)
            definitions.extend(result.tools)
            cursor = result.next_cursor
            if not cursor or cursor in seen_cursors:
                break
            seen_cursors.add(cursor)

        if self._tool_filter is not None:
            missing = self._tool_filter - {d.name for d in definitions}
            if missing:
                logger.warning(
                    "MCP toolset (%s): tool_filter names tools the server does not offer: %s",
                    self._description,
                    ", ".join(sorted(missing)),
                )
            definitions = [d for d in definitions if d.name in self._tool_filter]
        return [MCPTool(self, d.name, self._spec(d)) for d in definitions]

    def _spec(self, definition: MCPToolDefinition) -> ToolSpec:
        schema = definition.input_schema
        parameters: dict[str, Any] = (
            copy.deepcopy(schema)
            if isinstance(schema, dict) and schema
            else {"type": "object", "properties": {}}
        )
        return ToolSpec(
            name=model_safe_name(f"{self._name_prefix}{definition.name}"),
            description=definition.description or definition.title or "",
            parameters=parameters,
        )

    def __repr__(self) -> str:
        state = "open" if self.is_open else "closed"
        return f"MCPToolset({self._description}, {state})"


class MCPTool:
    """One tool of an MCP server, as a relaykit ``Tool``; made by :meth:`MCPToolset.list_tools`.

    ``call`` sends ``tools/call`` over the toolset's session. The text blocks of the result,
    joined with newlines, are returned as a ``str``; a result with no text returns its
    structured content (a dict, usually). A result the server flags as an error raises
    ``ToolError``, so the model sees ``error: <text>``; transport and protocol failures
    propagate as the SDK's exceptions.

    Example::

        async with MCPToolset.stdio(sys.executable, ["server.py"]) as toolset:
            add = next(t for t in await toolset.list_tools() if t.name == "add")
            await add.call(ctx, {"a": 1, "b": 2})   # -> "3"
    """

    __slots__ = ("_mcp_name", "_spec", "_toolset")

    def __init__(self, toolset: MCPToolset, mcp_name: str, spec: ToolSpec) -> None:
        self._toolset = toolset
        self._mcp_name = mcp_name
        self._spec = spec

    @property
    def name(self) -> str:
        """The name the model sees (``spec.name``: with the toolset's prefix, model-safe)."""
        return self._spec.name

    @property
    def spec(self) -> ToolSpec:
        """Name (with the toolset's prefix), description and input schema from the server."""
        return self._spec

    @property
    def mcp_name(self) -> str:
        """The tool's name on the server (without ``name_prefix``)."""
        return self._mcp_name

    @property
    def toolset(self) -> MCPToolset:
        """The toolset whose session this tool calls."""
        return self._toolset

    async def call(self, ctx: ToolContext, arguments: dict[str, object]) -> object:
        """Call the tool on the server with ``arguments``; see the class docstring."""
        result = await self._toolset.session.call_tool(self._mcp_name, arguments)
        return _result_value(self._mcp_name, result)

    def __repr__(self) -> str:
        return f"MCPTool({self.name!r})"


def _result_value(tool_name: str, result: CallToolResult) -> object:
    """A ``CallToolResult`` as a tool return value (or a ToolError for an error result)."""
    texts = [text for block in result.content if (text := _block_text(block)) is not None]
    if result.is_error:
        raise ToolError("\n".join(texts) or f"MCP tool {tool_name!r} failed (no message given)")
    if texts:
        return "\n".join(texts)
    if result.structured_content is not None:
        return result.structured_content
    return ""


def _block_text(block: ContentBlock) -> str | None:
    """The text a model should see for one content block."""
    from mcp.types import (
        AudioContent,
        EmbeddedResource,
        ImageContent,
        ResourceLink,
        TextContent,
        TextResourceContents,
    )

    if isinstance(block, TextContent):
        return block.text
    if isinstance(block, EmbeddedResource):
        if isinstance(block.resource, TextResourceContents):
            return block.resource.text
        return f"[binary resource {block.resource.uri} omitted]"
    if isinstance(block, ImageContent | AudioContent):
        return f"[{block.type} ({block.mime_type}) omitted]"
    if isinstance(block, ResourceLink):
        return f"[resource link: {block.uri}]"
    return None


def _sole_leaf(exc: BaseException) -> BaseException:
    """The one exception inside a (nested) exception group of a single leaf, else ``exc``."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


@asynccontextmanager
async def _streamable_http(
    url: str, headers: dict[str, str] | None
) -> AsyncIterator[TransportStreams]:
    """The SDK's streamable-HTTP transport over an HTTP client that sends ``headers``."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    timeout = httpx2.Timeout(_HTTP_TIMEOUT, read=_HTTP_SSE_READ_TIMEOUT)
    async with (
        httpx2.AsyncClient(headers=headers, timeout=timeout) as client,
        streamable_http_client(url, http_client=client) as streams,
    ):
        yield streams
