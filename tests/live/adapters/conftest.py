"""A scripted loopback WebSocket server that the real provider SDKs talk to.

Each test gives the server a script, ``async def script(peer: Peer)``, that plays the provider's
side of one connection: ``await peer.recv()`` (the next JSON frame the client sent),
``await peer.send(obj)``, ``await peer.close(code, reason)``, ``peer.abort()`` (drop the socket
without a close frame) and ``await peer.wait_closed()``. Every frame the client sends is recorded
in ``peer.frames``, read by the script or not, so tests assert on exactly what went over the
wire. A script that fails makes the test fail at teardown (or at ``await server.finished()``).

Gemini's SDK always speaks ``wss://`` to its base URL, so ``gemini_server`` serves TLS with a
throwaway self-signed certificate for 127.0.0.1 and points ``SSL_CERT_FILE`` at it (which the
SDK reads when its client is built). ``openai_server`` is plain ``ws://``.

Tests import nothing from here: they use the fixtures ``gemini_server`` and ``openai_server``.
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import json
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

GUARD_SECONDS = 10.0
"""How long a script waits for the client's next frame before the test fails (a hang guard)."""

Script = Callable[["Peer"], Awaitable[None]]


class Peer:
    """The server's end of one client connection, as a script sees it."""

    def __init__(self, ws: ServerConnection) -> None:
        self.ws = ws
        #: Every frame the client sent, parsed from JSON, in order.
        self.frames: list[Any] = []
        #: The request path (with query) the client connected to.
        self.path = ws.request.path if ws.request else ""
        #: The handshake's request headers (lower-case names).
        self.headers = (
            {k.lower(): v for k, v in ws.request.headers.raw_items()} if ws.request else {}
        )
        self._unread: asyncio.Queue[Any] = asyncio.Queue()
        #: The ``event_id`` of every frame that had one, in order (taken out of the frame).
        self.event_ids: list[str] = []

    async def _read_all(self) -> None:
        try:
            async for raw in self.ws:
                frame = json.loads(raw)
                if isinstance(frame, dict) and "event_id" in frame:
                    # A client event's id (OpenAI Realtime): kept aside, so that scripts compare
                    # what was sent; an error event can name it.
                    self.event_ids.append(frame.pop("event_id"))
                self.frames.append(frame)
                self._unread.put_nowait(frame)
        except ConnectionClosed:
            pass

    async def recv(self) -> Any:
        """The next frame the client sent (fails the test if none comes)."""
        async with asyncio.timeout(GUARD_SECONDS):
            return await self._unread.get()

    async def send(self, obj: Any) -> None:
        await self.ws.send(json.dumps(obj))

    async def close(self, code: int = 1000, reason: str = "") -> None:
        await self.ws.close(code, reason)

    def abort(self) -> None:
        """Drop the TCP connection without a close frame, as a crashed server would."""
        self.ws.transport.abort()

    async def wait_closed(self) -> None:
        """Wait until the client closes the connection."""
        async with asyncio.timeout(GUARD_SECONDS):
            await self.ws.wait_closed()


class LiveServer:
    """A WebSocket server on 127.0.0.1 (random port) that runs one script per connection."""

    def __init__(self, tls: ssl.SSLContext | None) -> None:
        self.tls = tls
        self.port = 0
        self.script: Script | None = None
        #: When set, the HTTP status that refuses every WebSocket handshake.
        self.refuse_status: int | None = None
        #: One peer per connection, in order.
        self.peers: list[Peer] = []
        self.errors: list[BaseException] = []
        self._handlers: list[asyncio.Future[None]] = []

    @property
    def http_url(self) -> str:
        """The base URL to give an SDK (``https`` when the server speaks TLS)."""
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def run(self, script: Script) -> None:
        """Play ``script`` on each next connection."""
        self.script = script

    def process_request(self, ws: ServerConnection, request: Request) -> Response | None:
        if self.refuse_status is None:
            return None
        return ws.respond(self.refuse_status, "refused by the test server\n")

    async def handler(self, ws: ServerConnection) -> None:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._handlers.append(done)
        peer = Peer(ws)
        self.peers.append(peer)
        reader = asyncio.create_task(peer._read_all())
        try:
            if self.script is None:
                raise AssertionError("the test gave the server no script")
            await self.script(peer)
        except BaseException as exc:
            self.errors.append(exc)
            await ws.close(1011, "test script failed")
        finally:
            # A script that returns ends its connection normally; every frame that came before
            # the close is in peer.frames once the reader has ended.
            await ws.close()
            await reader
            done.set_result(None)

    async def finished(self) -> None:
        """Wait for every script to end; re-raise the first one that failed."""
        async with asyncio.timeout(GUARD_SECONDS):
            for done in list(self._handlers):
                await done
        if self.errors:
            raise self.errors[0]

    @property
    def peer(self) -> Peer:
        """The one connection of a test that made one."""
        assert len(self.peers) == 1, f"expected one connection, got {len(self.peers)}"
        return self.peers[0]


async def _serving(tls: ssl.SSLContext | None) -> AsyncIterator[LiveServer]:
    server = LiveServer(tls)
    async with serve(
        server.handler, "127.0.0.1", 0, ssl=tls, process_request=server.process_request
    ) as ws_server:
        server.port = next(iter(ws_server.sockets)).getsockname()[1]
        yield server
        # Scripts end when their test is over; a failed one fails the test.
        await server.finished()


@pytest.fixture(scope="session")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A throwaway self-signed certificate for 127.0.0.1: ``(cert.pem, key.pem)``."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "relaykit live tests")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    folder = tmp_path_factory.mktemp("live-tls")
    cert_file, key_file = folder / "cert.pem", folder / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file


@pytest.fixture
async def gemini_server(
    certificate: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[LiveServer]:
    """A TLS server the Gemini SDK trusts (through ``SSL_CERT_FILE``)."""
    cert_file, key_file = certificate
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert_file, key_file)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert_file))
    async for server in _serving(tls):
        yield server


@pytest.fixture
async def openai_server() -> AsyncIterator[LiveServer]:
    """A plain ``ws://`` server."""
    async for server in _serving(None):
        yield server


@pytest.fixture
def closed_port_url() -> str:
    """An https URL on 127.0.0.1 where nothing listens."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"https://127.0.0.1:{port}"
