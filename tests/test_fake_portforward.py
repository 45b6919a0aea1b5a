"""FakeCluster's ``pods/portforward``: SPDY/3.1 framing, kubelet stream semantics, and the
real kubectl 1.32 forwarding bytes through it (skipped where kubectl is not installed)."""

from __future__ import annotations

import asyncio
import struct
import zlib
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import anyio
import pytest

from kubectl_support import kubectl_binary, run_kubectl
from kubemux._http.raw import ByteQueue
from kubemux.testing import FakeCluster, make_pod, write_kubeconfig
from kubemux.testing._wire.spdy import (
    DICTIONARY,
    GOAWAY,
    PING,
    REFUSED_STREAM,
    RST_STREAM,
    SYN_REPLY,
    SYN_STREAM,
    FrameReader,
    HeaderCompressor,
    SpdyError,
    encode_data,
    encode_ping,
    encode_syn_stream,
)
from portforward_support import (  # and the fixture cluster
    SpdyClient,
    echo_server,
    pod_cluster,  # noqa: F401
    port_forward,
    round_trip,
    round_trips_at_once,
)
from support import TIMEOUT

KUBECTL = kubectl_binary()
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl not on PATH")


# ---------------------------------------------------------------------- framing
def test_the_dictionary_is_spdy3s() -> None:
    # 1423 bytes; zlib streams name their dictionary by its Adler-32 (Go checks it)
    assert len(DICTIONARY) == 1423
    assert zlib.adler32(DICTIONARY) == 0xE3C6A7C2
    assert DICTIONARY.startswith(b"\x00\x00\x00\x07options\x00\x00\x00\x04head")
    assert DICTIONARY.endswith(b"charset=iso-8859-1,utf-,*,enq=0.")


def test_frames_round_trip_with_one_zlib_stream_per_direction() -> None:
    compressor, reader = HeaderCompressor(), FrameReader()
    wire = b"".join(
        [
            encode_syn_stream(compressor, 1, {"streamType": "error", "port": "80"}),
            encode_syn_stream(compressor, 3, {"streamType": "data", "port": "80"}, fin=True),
            encode_data(3, b"x" * 70_000),
            encode_data(3, b"", fin=True),
            encode_ping(7),
        ]
    )
    frames = []
    for start in range(0, len(wire), 1000):  # any cut between messages
        frames.extend(reader.feed(wire[start : start + 1000]))
    assert [(f.kind, f.stream_id) for f in frames] == [
        (SYN_STREAM, 1),
        (SYN_STREAM, 3),
        (0, 3),
        (0, 3),
        (PING, 0),
    ]
    assert frames[0].headers == {"streamtype": "error", "port": "80"}  # names lowercased
    assert frames[1].headers["streamtype"] == "data" and frames[1].fin
    assert frames[2].data == b"x" * 70_000 and not frames[2].fin
    assert frames[3].fin and frames[4].value == 7


def _control(kind: int, payload: bytes, version: int = 3) -> bytes:
    return struct.pack("!HHI", 0x8000 | version, kind, len(payload)) + payload


@pytest.mark.parametrize(
    ("wire", "message"),
    [
        (struct.pack("!II", 1, 0xFFFFFF), "a frame of 16777215 bytes"),
        (struct.pack("!II", 0, 3) + b"abc", "DATA frame on stream 0"),
        (_control(SYN_STREAM, struct.pack("!IIBB", 1, 0, 0, 0) + b"not zlib"), "inflate"),
        (_control(PING, b"\x00\x00\x00\x01", version=2), "SPDY version 2"),
        (_control(RST_STREAM, b"\x00\x00"), "short control frame"),
        (
            # a zlib bomb: 16 MiB of headers from a few KiB
            _control(
                SYN_STREAM,
                struct.pack("!IIBB", 1, 0, 0, 0)
                + zlib.compressobj(9, zdict=DICTIONARY).compress(
                    struct.pack("!I", 1) + struct.pack("!I", 1 << 24) + b"a" * (1 << 24)
                ),
            ),
            "over 65536 bytes",
        ),
    ],
    ids=["huge", "stream-0", "bad-zlib", "version", "short", "zlib-bomb"],
)
def test_hostile_frames_are_protocol_errors(wire: bytes, message: str) -> None:
    with pytest.raises(SpdyError, match=message):
        FrameReader().feed(wire)


def test_unknown_control_frames_are_skipped() -> None:
    reader = FrameReader()
    assert reader.feed(_control(0x77, b"whatever") + encode_ping(3))[0].value == 3


# ---------------------------------------------------------------------- raw tunnel
@pytest.fixture
async def plain() -> AsyncIterator[FakeCluster]:
    async with FakeCluster(name="plain") as fake:
        fake.create("pods", make_pod("web-1", "default"))
        yield fake


async def _tunnel(fake: FakeCluster, session: aiohttp.ClientSession) -> SpdyClient:
    url = f"{fake.server}/api/v1/namespaces/default/pods/web-1/portforward"
    ws = await session.ws_connect(url, protocols=["SPDY/3.1+portforward.k8s.io"])
    assert ws.protocol == "SPDY/3.1+portforward.k8s.io"
    return SpdyClient(ws)


def _pair(request: int, port: int = 80) -> list[dict[str, str]]:
    return [
        {"streamType": kind, "port": str(port), "requestID": str(request)}
        for kind in ("error", "data")
    ]


async def test_a_raw_pair_forwards_bytes_and_both_streams_end(plain: FakeCluster) -> None:
    async with echo_server() as port, aiohttp.ClientSession() as session:
        plain.forward_port(80, ("127.0.0.1", port))
        client = await _tunnel(plain, session)
        error, data = _pair(0)
        await client.open(1, error)
        await client.send(encode_data(1, b"", fin=True))  # kubectl writes nothing there
        await client.open(3, data)
        replies = [await client.frame(), await client.frame()]
        assert [(f.kind, f.stream_id) for f in replies if f] == [(SYN_REPLY, 1), (SYN_REPLY, 3)]
        await client.send(encode_data(3, b"ping-pong"))
        await client.send(encode_data(3, b"", fin=True))
        echoed, fins = b"", set()
        while len(fins) < 2:
            frame = await client.frame()
            assert frame is not None and frame.kind == 0
            echoed += frame.data if frame.stream_id == 3 else b""
            assert frame.stream_id == 3 or not frame.data  # nothing on the error stream
            if frame.fin:
                fins.add(frame.stream_id)
        assert echoed == b"ping-pong" and fins == {1, 3}
        await client.ws.close()


async def test_a_port_without_a_target_gets_the_kubelets_error(plain: FakeCluster) -> None:
    async with aiohttp.ClientSession() as session:
        client = await _tunnel(plain, session)
        for sid, headers in zip((1, 3), _pair(0, port=8080), strict=True):
            await client.open(sid, headers)
        message = b""
        while True:
            frame = await client.frame()
            assert frame is not None
            if frame.kind == 0 and frame.stream_id == 1:
                message += frame.data
                if frame.fin:
                    break
        assert b"error forwarding port 8080 to pod web-1" in message
        assert b"connect: connection refused" in message
        await client.ws.close()


async def test_hostile_streams_are_refused_and_the_connection_lives_on(
    plain: FakeCluster,
) -> None:
    async with aiohttp.ClientSession() as session:
        client = await _tunnel(plain, session)
        await client.open(1, {"streamType": "data"})  # no port
        await client.open(3, {"streamType": "stdin", "port": "80"})  # not a type of port-forward
        await client.open(5, {"streamType": "data", "port": "99999"})
        await client.open(7, {"streamType": "data", "port": "80", "requestID": "1"})
        await client.open(9, {"streamType": "data", "port": "80", "requestID": "1"})  # twice
        await client.open(2, {"streamType": "data", "port": "80"})  # an even (server) id
        await client.send(encode_data(1001, b"to nowhere"))  # a stream never opened
        await client.send(encode_ping(41))
        seen = []
        while len(seen) < 7:
            frame = await client.frame()
            assert frame is not None
            seen.append((frame.kind, frame.stream_id, frame.value))
        assert seen == [
            (RST_STREAM, 1, REFUSED_STREAM),
            (RST_STREAM, 3, REFUSED_STREAM),
            (RST_STREAM, 5, REFUSED_STREAM),
            (SYN_REPLY, 7, 0),
            (RST_STREAM, 9, REFUSED_STREAM),
            (RST_STREAM, 2, 1),  # PROTOCOL_ERROR
            (PING, 0, 41),  # still answering
        ]
        await client.ws.close()


async def test_too_many_half_open_requests_are_refused(plain: FakeCluster) -> None:
    async with aiohttp.ClientSession() as session:
        client = await _tunnel(plain, session)
        for request in range(130):
            await client.open(2 * request + 1, _pair(request)[0])
        kinds = []
        for _ in range(130):
            frame = await client.frame()
            assert frame is not None
            kinds.append(frame.kind)
        assert kinds == [SYN_REPLY] * 128 + [RST_STREAM] * 2
        await client.ws.close()


async def test_a_huge_frame_ends_the_tunnel_with_a_goaway(plain: FakeCluster) -> None:
    async with aiohttp.ClientSession() as session:
        client = await _tunnel(plain, session)
        await client.send(struct.pack("!II", 1, 0xFFFFFF))  # 16 MiB announced
        frame = await client.frame()
        assert frame is not None and frame.kind == GOAWAY
        assert await client.frame() is None  # closed
        await client.ws.close()
        # the fake serves the next one
        other = await _tunnel(plain, session)
        await other.send(encode_ping(5))
        frame = await other.frame()
        assert frame is not None and frame.kind == PING and frame.value == 5
        await other.ws.close()
    await plain.wait_for(lambda: plain.open_upgrades == 0, timeout=TIMEOUT)


# ---------------------------------------------------------------------- real kubectl
@needs_kubectl
async def test_kubectl_port_forward_round_trips_bytes(cluster: FakeCluster, tmp_path: Path) -> None:
    assert KUBECTL is not None
    kubeconfig = write_kubeconfig(tmp_path / "config", {"pf": cluster})
    async with echo_server() as port:
        cluster.forward_port(80, ("127.0.0.1", port))
        async with port_forward(KUBECTL, kubeconfig, "pod/web-1", "0:80") as forward:
            for size in (1, 5, 200_000):  # one after another on one tunnel
                payload = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
                assert await round_trip(forward.port, payload) == payload
            await round_trips_at_once(forward.port, 5, 1000)  # and at once
            assert forward.stdout.startswith("Forwarding from 127.0.0.1:")
            assert cluster.open_upgrades == 1
        assert forward.proc.returncode is not None  # kubectl ended; so did the tunnel
    await cluster.wait_for(lambda: cluster.open_upgrades == 0, timeout=TIMEOUT)
    tunnels = [r for r in cluster.requests if r.subresource == "portforward"]
    assert len(tunnels) == 1  # one WebSocket for every connection
    assert "Handling connection for" in forward.stdout


@needs_kubectl
async def test_kubectl_port_forward_to_a_closed_port_reports_the_kubelets_error(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    assert KUBECTL is not None
    kubeconfig = write_kubeconfig(tmp_path / "config", {"pf": cluster})
    async with port_forward(KUBECTL, kubeconfig, "pod/web-1", "0:8080") as forward:
        assert await round_trip(forward.port, b"hello") == b""
        code = await forward.wait()  # kubectl drops the tunnel on an error stream message
    assert code != 0
    assert "error forwarding port 8080 to pod web-1" in forward.stderr
    assert "lost connection to pod" in forward.stderr


# ---------------------------------------------------------------------- plain SPDY upgrades
SPDY_ENV = {
    "KUBECTL_PORT_FORWARD_WEBSOCKETS": "false",
    "KUBECTL_REMOTE_COMMAND_WEBSOCKETS": "false",
}


async def _raw_upgrade(
    fake: FakeCluster, path: str, protocol: str
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", fake.port)
    writer.write(
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade\r\n"
        f"Upgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: {protocol}\r\n"
        "Content-Length: 0\r\n\r\n".encode()
    )
    with anyio.fail_after(TIMEOUT):
        head = await reader.readuntil(b"\r\n\r\n")
    return reader, writer, head


async def test_a_plain_spdy_upgrade_negotiates_the_protocol(plain: FakeCluster) -> None:
    path = "/api/v1/namespaces/default/pods/web-1/portforward"
    reader, writer, head = await _raw_upgrade(plain, path, "portforward.k8s.io")
    assert head.startswith(b"HTTP/1.1 101 Switching Protocols\r\n")
    assert b"X-Stream-Protocol-Version: portforward.k8s.io\r\n" in head
    assert b"Transfer-Encoding" not in head and b"Content-Length" not in head
    writer.write(encode_ping(9) + struct.pack("!II", 1, 0xFFFFFF))  # then a 16 MiB frame
    with anyio.fail_after(TIMEOUT):
        rest = await reader.read()  # a PING back, a GOAWAY, the end
    frames = FrameReader().feed(rest)
    assert [(f.kind, f.value) for f in frames] == [(PING, 9), (GOAWAY, 0)]
    writer.close()
    reader, writer, head = await _raw_upgrade(plain, path, "v4.channel.k8s.io")
    assert head.startswith(b"HTTP/1.1 403 Forbidden\r\n")
    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    with anyio.fail_after(TIMEOUT):
        body = await reader.readexactly(length)
    assert b"unable to negotiate protocol: client supports [v4.channel.k8s.io]" in body
    writer.close()
    await plain.wait_for(lambda: plain.open_upgrades == 0, timeout=TIMEOUT)


@needs_kubectl
async def test_kubectl_port_forward_over_plain_spdy(cluster: FakeCluster, tmp_path: Path) -> None:
    assert KUBECTL is not None
    kubeconfig = write_kubeconfig(tmp_path / "config", {"pf": cluster})
    async with echo_server() as port:
        cluster.forward_port(80, ("127.0.0.1", port))
        async with port_forward(KUBECTL, kubeconfig, "pod/web-1", "0:80", env=SPDY_ENV) as forward:
            for size in (3, 300_000):
                assert await round_trip(forward.port, b"s" * size) == b"s" * size
            assert cluster.open_upgrades == 1
    await cluster.wait_for(lambda: cluster.open_upgrades == 0, timeout=TIMEOUT)
    assert [r.method for r in cluster.requests if r.subresource == "portforward"] == ["POST"]


async def kubectl_exec(
    kubeconfig: Path, *args: str, stdin: bytes = b"", env: dict[str, str] | None = None
) -> tuple[int, str, str]:
    assert KUBECTL is not None
    return await run_kubectl(KUBECTL, kubeconfig, "exec", *args, stdin=stdin, env=env)


EXECS = [
    (("web-1", "--", "echo", "hi", "there"), b"", (0, "hi there\n", "")),
    (("-i", "web-1", "--", "cat"), b"from stdin\n", (0, "from stdin\n", "")),
    (("web-1", "--", "false"), b"", (1, "", "command terminated with exit code 1\n")),
    (("web-1", "--", "sh", "-c", "exit 7"), b"", (7, "", "command terminated with exit code 7\n")),
]


@needs_kubectl
async def test_kubectl_exec_over_plain_spdy_matches_websocket(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "config", {"pf": cluster})
    for args, stdin, expected in EXECS:
        over_spdy = await kubectl_exec(kubeconfig, *args, stdin=stdin, env=SPDY_ENV)
        assert over_spdy == expected, args
        assert await kubectl_exec(kubeconfig, *args, stdin=stdin) == expected, args
    code, _, err = await kubectl_exec(kubeconfig, "web-1", "--", "nosuch", env=SPDY_ENV)
    assert code == 1 and 'exec: "nosuch": executable file not found in $PATH' in err
    methods = [r.method for r in cluster.requests if r.subresource == "exec"]
    assert methods.count("POST") == len(EXECS) + 1  # the SPDY upgrades
    assert methods.count("GET") == len(EXECS)  # the WebSockets
    await cluster.wait_for(lambda: cluster.open_upgrades == 0, timeout=TIMEOUT)


async def test_a_byte_queue_stops_reading_past_its_limit() -> None:
    calls: list[str] = []
    queue = ByteQueue(lambda: calls.append("pause"), lambda: calls.append("resume"), limit=10)
    queue.feed_data(b"12345")
    assert calls == []
    queue.feed_data(b"678901")  # 11 bytes buffered: the transport stops reading
    queue.feed_data(b"more")
    assert calls == ["pause"]
    assert await queue.read() == b"12345678901more"
    assert calls == ["pause", "resume"]
    queue.feed_eof()
    queue.feed_data(b"after the end")  # dropped
    assert await queue.read() == b""
    assert queue.is_eof()
