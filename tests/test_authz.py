"""registry.authorizer(context) against real FakeClusters (issue 33): TokenReview and its
cache, local RBAC with a SubjectAccessReview before a denial, revocation signals, reading a
store as a user, and no token anywhere it could leak."""

from __future__ import annotations

import contextlib
import logging
import random
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import anyio
import pytest

import kubemux
from kubemux import WatcherRegistry
from kubemux._authz.attributes import Attributes
from kubemux._authz.authorizer import Authorizer, AuthorizerSettings
from kubemux._authz.caches import token_key
from kubemux._authz.user import User
from kubemux.testing import FakeCluster, kubeconfig_dict, make_pod
from kubemux.testing._state.state import RBAC_RESOURCES
from support import TIMEOUT
from users_support import PODS_READ, RBAC, binding, who


@pytest.fixture
async def cluster() -> AsyncIterator[FakeCluster]:
    async with FakeCluster(tokens={"admin"}, rbac=True, name="prod") as c:
        c.create(
            RBAC_RESOURCES["roles"],
            {"metadata": {"namespace": "web", "name": "reader"}, "rules": [PODS_READ]},
        )
        c.create(
            RBAC_RESOURCES["rolebindings"],
            binding("web", "alice", "Role", "reader", who("User", "alice")),
        )
        c.create(
            RBAC_RESOURCES["rolebindings"],
            binding("db", "team", "ClusterRole", "view", who("Group", "db-team")),
        )
        c.create(
            RBAC_RESOURCES["rolebindings"],
            binding("web", "broken", "ClusterRole", "gone", who("Group", "devs")),
        )
        c.create(
            RBAC_RESOURCES["rolebindings"],
            binding("web", "sa", "ClusterRole", "edit", who("ServiceAccount", "deployer")),
        )
        for ns in ("web", "db", "other"):
            for i in range(2):
                c.create("pods", make_pod(f"{ns}-{i}", ns))
        yield c


@contextlib.asynccontextmanager
async def open_registry(cluster: FakeCluster) -> AsyncIterator[WatcherRegistry]:
    """A registry with the one context ``prod`` (entered in the test's own task)."""
    cfg = kubeconfig_dict({"prod": cluster})
    async with WatcherRegistry({"prod": kubemux.ContextConfig.from_dict("prod", cfg)}) as reg:
        yield reg


async def authorizer(registry: WatcherRegistry, **settings: Any) -> Authorizer:
    with anyio.fail_after(TIMEOUT):
        return await registry.authorizer(
            "prod", settings=AuthorizerSettings(**settings) if settings else None
        )


async def test_authenticate_valid_invalid_expired_cached(cluster: FakeCluster) -> None:
    async with open_registry(cluster) as registry:
        authz = await authorizer(registry)
        token = cluster.add_user("alice", groups=("devs",), uid="u-1", extra={"team": ["a"]})
        alice = await authz.authenticate(token)
        assert alice == User("alice", "u-1", ("devs", "system:authenticated"), {"team": ("a",)})
        assert await authz.authenticate(token) is alice
        assert authz.token_reviews_sent == 1
        sa = await authz.authenticate(cluster.service_account_token("web", "deployer"))
        assert sa.groups == (
            "system:serviceaccounts",
            "system:serviceaccounts:web",
            "system:authenticated",
        )
        for bad in ("nonsense", cluster.add_user("old", ttl=-5), "", "x" * 70_000, "a\nb"):
            with pytest.raises(kubemux.Unauthorized):
                await authz.authenticate(bad)
        sent = authz.token_reviews_sent
        assert sent == 4  # the empty, the huge and the unprintable token never leave kubemux
        with pytest.raises(kubemux.Unauthorized):
            await authz.authenticate("nonsense")  # a failure is kept too (briefly)
        assert authz.token_reviews_sent == sent
        # a token that expires in 2 s: its answer is kept no longer than that
        short = cluster.add_user("brief", ttl=2)
        await authz.authenticate(short)
        found = authz._tokens.get(token_key(short))
        assert found is not None and found[1] - time.monotonic() <= 2.0
        # concurrent first uses of one token: one review
        fresh = cluster.add_user("carol")
        before = authz.token_reviews_sent
        async with anyio.create_task_group() as tg:
            for _ in range(10):
                tg.start_soon(authz.authenticate, fresh)
        assert authz.token_reviews_sent == before + 1


async def test_allowed_across_rbac_shapes(cluster: FakeCluster) -> None:
    async with open_registry(cluster) as registry:
        authz = await authorizer(registry, review_denials=False)
        alice = User("alice", groups=("system:authenticated",))
        carol = User("carol", groups=("db-team", "system:authenticated"))
        deployer = User(
            "system:serviceaccount:web:deployer",
            groups=("system:serviceaccounts", "system:serviceaccounts:web", "system:authenticated"),
        )
        root = User("root", groups=("system:masters",))
        cases = [
            (alice, "list", "pods", {"namespace": "web"}, True),
            (alice, "list", "pods", {"namespace": "db"}, False),
            (alice, "list", "pods", {}, False),
            (alice, "get", "pods", {"namespace": "web", "name": "p", "subresource": "log"}, False),
            (carol, "list", "pods", {"namespace": "db"}, True),  # RoleBinding -> aggregated view
            (carol, "list", "deployments.apps", {"namespace": "db"}, True),
            (carol, "list", "pods", {"namespace": "web"}, False),
            (deployer, "delete", "pods", {"namespace": "web", "name": "p"}, True),  # SA, no ns
            (
                deployer,
                "update",
                "deployments.apps",
                {"namespace": "web", "name": "d", "subresource": "scale"},
                True,
            ),
            (deployer, "delete", "pods", {"namespace": "db", "name": "p"}, False),
            (root, "delete", "nodes", {"name": "n"}, True),
        ]
        for user, verb, resource, where, expected in cases:
            assert await authz.allowed(user, verb, resource, **where) is expected, (
                user.name,
                verb,
                resource,
                where,
            )
        assert authz.reviews_sent == 0


async def test_a_review_before_any_denial_and_the_webhook(cluster: FakeCluster) -> None:
    async with open_registry(cluster) as registry:
        authz = await authorizer(registry)
        bob = User("bob", groups=("system:authenticated",))
        alice = User("alice", groups=("system:authenticated",))
        for _ in range(1000):
            assert await authz.allowed(alice, "list", "pods", namespace="web")
        assert authz.reviews_sent == 0  # what local RBAC allows costs no review
        assert not await authz.allowed(bob, "list", "pods", namespace="db")
        assert authz.reviews_sent == 1
        assert not await authz.allowed(bob, "list", "pods", namespace="db")
        assert authz.reviews_sent == 1  # the denial is kept (deny_ttl)
        cluster.webhook = lambda caller, request: (
            caller.name == "bob" and request.namespace == "other"
        )
        decision = await authz.decide(bob, authz.attributes("list", "pods", namespace="other"))
        assert (decision.allowed, decision.by) == (True, "review")
        assert authz.reviews_sent == 2
        # the review sent the user as TokenReview gave it, and the request's selectors
        reviews = [
            r for r in cluster.requests if r.resource == "subjectaccessreviews.authorization.k8s.io"
        ]
        assert len(reviews) == 2 and all(r.token == "admin" for r in reviews)
        # a denial's reason is the API server's, as its 403 carries it
        devs = User("dave", groups=("devs", "system:authenticated"))
        attrs = authz.attributes("list", "secrets", namespace="web")
        denial = await authz.decide(devs, attrs)
        assert not denial.allowed
        assert authz.forbidden(devs, attrs, denial)["message"] == (
            'secrets is forbidden: User "dave" cannot list resource "secrets" in API group "" in the '
            'namespace "web": RBAC: clusterrole.rbac.authorization.k8s.io "gone" not found'
        )


async def test_revocation_and_grants_reach_waiters_within_2_s(cluster: FakeCluster) -> None:
    async with open_registry(cluster) as registry:
        authz = await authorizer(registry)
        alice = User("alice", groups=("system:authenticated",))
        attrs = Attributes(verb="watch", resource="pods", namespace="web")
        assert (await authz.decide(alice, attrs)).allowed
        revoked = anyio.Event()
        denial: list[Any] = []

        async def watcher() -> None:
            denial.append(await authz.wait_revoked(alice, attrs))
            revoked.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(watcher)
            version = authz.version
            cluster.delete(RBAC_RESOURCES["rolebindings"], "web", "alice")
            with anyio.fail_after(2.0):
                await revoked.wait()
        assert authz.version > version and not denial[0].allowed
        # a new grant is honoured as soon as the informer has it
        version = authz.version
        cluster.create(
            RBAC_RESOURCES["rolebindings"],
            binding("web", "alice-2", "Role", "reader", who("User", "alice")),
        )
        with anyio.fail_after(2.0):
            await authz.wait_changed(version)
        assert (await authz.decide(alice, attrs)).allowed
        # a role losing its rule revokes too
        waiter_done = anyio.Event()
        async with anyio.create_task_group() as tg:

            async def wait_role() -> None:
                await authz.wait_revoked(alice, attrs)
                waiter_done.set()

            tg.start_soon(wait_role)
            cluster.update(
                RBAC_RESOURCES["roles"],
                {"metadata": {"namespace": "web", "name": "reader"}, "rules": []},
            )
            with anyio.fail_after(2.0):
                await waiter_done.wait()


async def test_reading_a_store_as_a_user(cluster: FakeCluster) -> None:
    async with open_registry(cluster) as registry:
        authz = await authorizer(registry)
        with anyio.fail_after(TIMEOUT):
            store = await registry.watch("prod", "pods")
        alice = User("alice", groups=("system:authenticated",))
        carol = User("carol", groups=("db-team", "system:authenticated"))
        both = User("erin", groups=("db-team",))
        cluster.create(
            RBAC_RESOURCES["rolebindings"],
            binding("web", "erin", "Role", "reader", who("User", "erin")),
        )
        with anyio.fail_after(TIMEOUT):
            while authz.namespaces(both, "list", "pods") != {"web", "db"}:
                await authz.wait_changed(authz.version)
        names = lambda objs: sorted(o["metadata"]["name"] for o in objs)
        assert names(await authz.list_as(alice, store, "pods")) == ["web-0", "web-1"]
        assert names(await authz.list_as(carol, store, "pods")) == ["db-0", "db-1"]
        assert names(await authz.list_as(both, store, "pods")) == ["db-0", "db-1", "web-0", "web-1"]
        assert await authz.list_as(alice, store, "pods", namespace="db") == []
        assert (
            len(await authz.list_as(User("root", groups=("system:masters",)), store, "pods")) == 6
        )


async def test_aggregation_reaches_the_authorizer(cluster: FakeCluster) -> None:
    async with open_registry(cluster) as registry:
        authz = await authorizer(registry, review_denials=False)
        carol = User("carol", groups=("db-team",))
        assert not await authz.allowed(carol, "list", "widgets.example.com", namespace="db")
        version = authz.version
        cluster.create(
            RBAC_RESOURCES["clusterroles"],
            {
                "metadata": {"name": "widgets", "labels": {f"{RBAC}/aggregate-to-view": "true"}},
                "rules": [
                    {"apiGroups": ["example.com"], "resources": ["widgets"], "verbs": ["list"]}
                ],
            },
        )
        with anyio.fail_after(TIMEOUT):
            while not await authz.allowed(carol, "list", "widgets.example.com", namespace="db"):
                version = await authz.wait_changed(version)


async def test_local_decisions_match_the_api_server(cluster: FakeCluster) -> None:
    """A differential check: kubemux's decision and 403 text against the fake's own answer
    to the same request made with the user's token."""
    async with open_registry(cluster) as registry:
        authz = await authorizer(registry, review_denials=False)
        users = {
            "alice": cluster.add_user("alice"),
            "carol": cluster.add_user("carol", groups=("db-team",)),
            "dave": cluster.add_user("dave", groups=("devs",)),
            "deployer": cluster.service_account_token("web", "deployer"),
        }
        known = {name: await authz.authenticate(token) for name, token in users.items()}
        paths = {
            ("pods", ""): "/api/v1/namespaces/{ns}/pods",
            ("secrets", ""): "/api/v1/namespaces/{ns}/secrets",
            ("deployments", "apps"): "/apis/apps/v1/namespaces/{ns}/deployments",
            ("configmaps", ""): "/api/v1/namespaces/{ns}/configmaps",
        }
        rng = random.Random(33)
        disagreements = []
        async with aiohttp.ClientSession() as session:
            for _ in range(120):
                name = rng.choice(sorted(users))
                (resource, group), path = rng.choice(sorted(paths.items()))
                ns = rng.choice(["web", "db", "other"])
                attrs = Attributes(verb="list", resource=resource, api_group=group, namespace=ns)
                decision = await authz.decide(known[name], attrs)
                url = cluster.server + path.format(ns=ns)
                async with session.get(
                    url, headers={"Authorization": f"Bearer {users[name]}"}
                ) as resp:
                    body = await resp.json(content_type=None)
                    if decision.allowed != (resp.status == 200) or (
                        not decision.allowed
                        and authz.forbidden(known[name], attrs, decision) != body
                    ):
                        disagreements.append((name, resource, ns, resp.status, body))
        assert disagreements == []


async def test_no_token_in_logs_status_or_repr(
    cluster: FakeCluster, caplog: pytest.LogCaptureFixture
) -> None:
    async with open_registry(cluster) as registry:
        caplog.set_level(logging.DEBUG)
        authz = await authorizer(registry)
        token = cluster.add_user("alice")
        user = await authz.authenticate(token)
        with pytest.raises(kubemux.Unauthorized):
            await authz.authenticate(token + "x")
        await authz.allowed(user, "list", "secrets", namespace="web")
        texts = [
            caplog.text,
            repr(authz),
            repr(registry),
            repr(registry.status()),
            repr(user),
            str(authz.statistics()),
            repr(authz._tokens),
        ]
        for text in texts:
            assert token not in text and token[-20:] not in text


async def test_an_unknown_context_and_a_closed_registry(cluster: FakeCluster) -> None:
    async with open_registry(cluster) as registry:
        with pytest.raises(kubemux.ContextNotFound):
            await registry.authorizer("nope")
        assert "synced" in repr(await authorizer(registry))


async def test_local_allows_can_be_reviewed_too(cluster: FakeCluster) -> None:
    """For a chain that can deny before RBAC: every decision is asked (and cached)."""
    async with open_registry(cluster) as registry:
        authz = await authorizer(registry, local_allows=False)
        alice = User("alice", groups=("system:authenticated",))
        for _ in range(3):
            decision = await authz.decide(alice, authz.attributes("list", "pods", namespace="web"))
            assert (decision.allowed, decision.by) == (True, "review")
        assert authz.reviews_sent == 1
        root = User("root", groups=("system:masters",))
        assert (
            await authz.decide(root, authz.attributes("delete", "nodes"))
        ).by == "system:masters"
        assert authz.reviews_sent == 1


async def test_a_stopped_context_is_followed_again(cluster: FakeCluster) -> None:
    """stop_watcher clears the RBAC stores (RESET): the authorizer serves nothing until it
    has watched them again, then answers from the fresh state."""
    async with open_registry(cluster) as registry:
        authz = await authorizer(registry, review_denials=False)
        alice = User("alice")
        assert await authz.allowed(alice, "list", "pods", namespace="web")
        assert await registry.stop_watcher("prod")
        cluster.delete(RBAC_RESOURCES["rolebindings"], "web", "alice")  # while nobody watches
        with anyio.fail_after(TIMEOUT):
            assert not await authz.allowed(alice, "list", "pods", namespace="web")
        assert authz.has_synced
