"""Continue tokens: opaque, tamper-proof, bound to a context and a resource, bounded in
size; expired snapshots get kube-apiserver's 410; remainingItemCount; snapshot pins."""

from __future__ import annotations

import base64

import orjson
import pytest

from kubemux.proxy._api.statuses import INCONSISTENT_CONTINUE, ProxyStatusError
from kubemux.proxy._api.tokens import (
    LATEST,
    MAX_TOKEN_LENGTH,
    ContinuePosition,
    ContinueTokens,
    SnapshotPins,
    remaining_item_count,
)

_INVALID = "invalid continue token: continue key is not valid"


def _decode_error(
    tokens: ContinueTokens, token: str, context: str = "prod", resource: str = "pods"
) -> ProxyStatusError:
    with pytest.raises(ProxyStatusError) as info:
        tokens.decode(token, context, resource)
    return info.value


def test_a_token_round_trips() -> None:
    tokens = ContinueTokens()
    token = tokens.encode("prod", "pods", 42, ("default", "web-7"), "12345", offset=500)
    assert token.isascii() and "=" not in token and "+" not in token and "/" not in token
    position = tokens.decode(token, "prod", "pods")
    assert position == ContinuePosition(42, ("default", "web-7"), 500, "12345")
    unicode = tokens.encode("ctx", "widgets.example.com", 1, ("", "naïve-ü"), "7")
    assert tokens.decode(unicode, "ctx", "widgets.example.com").last_key == ("", "naïve-ü")


def test_a_token_says_nothing_readable() -> None:
    tokens = ContinueTokens()
    token = tokens.encode(
        "arn:aws:eks:us-east-1:1:cluster/prod", "secrets", 3, ("kube-system", "admin"), "99"
    )
    raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
    assert b"arn:aws" not in raw  # the context is bound by the MAC, not carried
    assert b"secrets" not in raw


def test_another_contexts_or_resources_token_is_a_400() -> None:
    tokens = ContinueTokens()
    token = tokens.encode("prod", "pods", 1, ("default", "a"), "10")
    for context, resource in (("staging", "pods"), ("prod", "secrets"), ("prod ", "pods")):
        error = _decode_error(tokens, token, context, resource)
        assert error.code == 400
        assert error.reason == "BadRequest"
        assert error.message == f"{_INVALID}: not issued for this resource by this server"


def test_a_forged_or_tampered_token_is_a_400() -> None:
    tokens = ContinueTokens()
    token = tokens.encode("prod", "pods", 1, ("default", "a"), "10")
    raw = bytearray(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    for i in range(len(raw)):
        flipped = bytearray(raw)
        flipped[i] ^= 0x01
        forged = base64.urlsafe_b64encode(bytes(flipped)).rstrip(b"=").decode()
        assert _decode_error(tokens, forged).code == 400
    # the API server's own token shape (base64 JSON) is not ours
    theirs = base64.urlsafe_b64encode(b'{"v":"meta.k8s.io/v1","rv":10,"start":"default/a\\u0000"}')
    assert _decode_error(tokens, theirs.decode()).code == 400


@pytest.mark.parametrize(
    ("token", "detail"),
    [
        ("!!!!", "illegal base64 data"),
        ("abc=", "illegal base64 data"),
        ("a", "illegal base64 data"),
        ("YWJj", "too short"),
        ("x" * (MAX_TOKEN_LENGTH + 1), "too long"),
    ],
)
def test_malformed_tokens_get_the_api_servers_wording(token: str, detail: str) -> None:
    error = _decode_error(ContinueTokens(), token)
    assert error.message == f"{_INVALID}: {detail}"
    assert error.body.startswith(
        b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
    )


def test_a_token_from_another_process_is_refused() -> None:
    token = ContinueTokens().encode("prod", "pods", 1, ("default", "a"), "10")
    assert _decode_error(ContinueTokens(), token).code == 400  # a new random key
    same = ContinueTokens(b"k" * 32)
    assert same.decode(
        ContinueTokens(b"k" * 32).encode("prod", "pods", 1, ("d", "a"), "1"), "prod", "pods"
    )


def test_tokens_are_bounded_in_size() -> None:
    tokens = ContinueTokens()
    longest = tokens.encode("c", "pods", 2**62, ("n" * 253, "x" * 253), "9" * 20, offset=2**63 - 1)
    assert len(longest) < 800 < MAX_TOKEN_LENGTH
    with pytest.raises(ValueError, match="too long"):
        tokens.encode("c", "pods", 1, ("n" * 254, "x"), "1")
    with pytest.raises(ValueError, match="too long"):
        tokens.encode("c", "pods", 1, ("n", "x"), "1" * 65)


def test_an_expired_snapshot_is_the_api_servers_410_with_a_token_to_go_on() -> None:
    tokens = ContinueTokens()
    token = tokens.encode("prod", "pods", 7, ("default", "web-3"), "500", offset=3)
    with pytest.raises(ProxyStatusError) as info:
        tokens.decode(token, "prod", "pods", alive=lambda snapshot_id: False)
    error = info.value
    assert error.code == 410
    assert error.reason == "Expired"
    assert error.message == INCONSISTENT_CONTINUE
    assert error.message.startswith(
        "The provided continue parameter is too old to display a consistent"
    )
    fresh = error.status["metadata"]["continue"]
    # the body is laid out as the API server writes it, the token in metadata
    assert error.body == (
        b'{"kind":"Status","apiVersion":"v1","metadata":{"continue":"'
        + fresh.encode()
        + b'"},"status":"Failure","message":"'
        + INCONSISTENT_CONTINUE.encode()
        + b'","reason":"Expired","code":410}\n'
    )
    # the fresh token continues after the same key at the latest snapshot
    position = tokens.decode(fresh, "prod", "pods", alive=lambda snapshot_id: False)
    assert position == ContinuePosition(LATEST, ("default", "web-3"), 3, "500")
    # and it is bound like any other
    assert _decode_error(tokens, fresh, "staging").code == 400


def test_a_live_snapshot_decodes() -> None:
    tokens = ContinueTokens()
    pins: SnapshotPins[str] = SnapshotPins()
    sid = pins.pin("snapshot")
    token = tokens.encode("prod", "pods", sid, ("a", "b"), "1")
    assert tokens.decode(token, "prod", "pods", alive=pins.alive).snapshot_id == sid


def test_remaining_item_count() -> None:
    assert remaining_item_count(10, 0, 4, selective=False) == 6
    assert remaining_item_count(10, 8, 2, selective=False) == 0
    assert remaining_item_count(10, 4, 4, selective=True) is None


def test_snapshot_pins_expire_after_their_last_use() -> None:
    now = [0.0]
    pins: SnapshotPins[str] = SnapshotPins(ttl=10.0, max_pins=3, clock=lambda: now[0])
    a = pins.pin("a")
    b = pins.pin("b")
    assert a != b and LATEST not in (a, b)
    now[0] = 8.0
    assert pins.get(a) == "a"  # refreshes a
    now[0] = 12.0
    assert pins.get(b) is None  # b was last used at 0
    assert pins.alive(a)
    now[0] = 18.5
    assert not pins.alive(a)
    assert len(pins) == 0


def test_snapshot_pins_drop_the_least_recently_used_beyond_the_cap() -> None:
    pins: SnapshotPins[int] = SnapshotPins(max_pins=2)
    first = pins.pin(1)
    second = pins.pin(2)
    pins.get(first)
    third = pins.pin(3)
    assert pins.get(second) is None
    assert pins.get(first) == 1 and pins.get(third) == 3
    assert "ttl" in repr(pins)
    assert repr(ContinueTokens(b"secret-key-bytes")) == "<ContinueTokens>"  # never the key


def test_a_token_survives_a_json_round_trip_in_a_list_body() -> None:
    token = ContinueTokens().encode("prod", "pods", 1, ("default", "a"), "10")
    body = orjson.dumps({"metadata": {"continue": token}})
    assert orjson.loads(body)["metadata"]["continue"] == token
