"""labelSelector and fieldSelector: kube-apiserver's parse errors word for word, its
per-kind field labels, evaluation on decoded objects and on cached bytes, and bounded cost
for hostile selectors."""

from __future__ import annotations

import time
from typing import Any

import orjson
import pytest

from kubemux import Resource
from kubemux._resources import parse_resource
from kubemux.proxy._api.statuses import ProxyStatusError
from kubemux.proxy._query.selectors import (
    MAX_REQUIREMENTS,
    MAX_SELECTOR_LENGTH,
    ObjectFilter,
    parse_field_selector,
    parse_label_selector,
)
from kubemux.testing import make_pod

PODS = parse_resource("pods")
NODES = parse_resource("nodes")
WIDGETS = Resource(group="example.com", version="v1", plural="widgets", kind="Widget")
CLUSTER_WIDGETS = Resource(
    group="example.com", version="v1", plural="globals", kind="Global", namespaced=False
)

_KEY_RE = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_NAME_PART = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and "
    "end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex "
    f"used for validation is '{_KEY_RE}')"
)
_VALUE = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' "
    "or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
    f"'my_value',  or '12345', regex used for validation is '({_KEY_RE})?')"
)
_PREFIX = (
    "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
    "characters, '-' or '.', and must start and end with an alphanumeric character (e.g. "
    "'example.com', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
_U = "unable to parse requirement: "


def _label_error(text: str) -> ProxyStatusError:
    with pytest.raises(ProxyStatusError) as info:
        parse_label_selector(text)
    return info.value


@pytest.mark.parametrize(
    ("selector", "message"),
    [
        ("a in", _U + "found '' expected: '('"),
        ("a in b", _U + "found 'b' expected: '('"),
        ("a in (b", _U + "found '', expected: ',' or ')'"),
        ("a in (b c)", _U + "found 'c', expected: ',' or ')'"),
        ("a in (=)", _U + "found '=', expected: ',', ')' or identifier"),
        ("a notin (b,=)", _U + "found '=', expected: ',', or identifier"),
        ("=a", "found '=', expected: !, identifier, or 'end of string'"),
        (",a", "found ',', expected: !, identifier, or 'end of string'"),
        ("a,", "found '', expected: identifier after ','"),
        ("a,,b", "found ',', expected: identifier after ','"),
        ("a=b c", "found 'c', expected: ',' or 'end of string'"),
        ("a=b=c", "found '=', expected: ',' or 'end of string'"),
        ("a b", _U + "found 'b', expected: in, notin, =, ==, !=, gt, lt"),
        ("!", _U + "found '', expected: identifier"),
        ("!,", _U + "found ',', expected: identifier"),
        ("!=a", "found '!=', expected: !, identifier, or 'end of string'"),
        ("a=(b", _U + "found '(', expected: identifier"),
        ("a<=1", _U + "found '=', expected: identifier"),
        (
            "a>x",
            _U
            + "values[0]: Invalid value: \"x\": for 'Gt', 'Lt' operators, the value must be an integer",
        ),
        ("-a=b", _U + f'<nil>: Invalid value: "-a": {_NAME_PART}'),
        ("Example.com/x=y", _U + f'<nil>: Invalid value: "Example.com/x": {_PREFIX}'),
        ("/x=y", _U + '<nil>: Invalid value: "/x": prefix part must be non-empty'),
        (
            "example.com/=x",
            _U + f'<nil>: Invalid value: "example.com/": name part must be non-empty; {_NAME_PART}',
        ),
        (
            "a/b/c",
            _U + '<nil>: Invalid value: "a/b/c": a valid label key must consist of alphanumeric '
            "characters, '-', '_' or '.', and must start and end with an alphanumeric character "
            "(e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
            f"'{_KEY_RE}') with an optional DNS subdomain prefix and '/' (e.g. "
            "'example.com/MyName')",
        ),
        ("app=-x", _U + f'values[0][app]: Invalid value: "-x": {_VALUE}'),
        ("n<-3", _U + f'values[0][n]: Invalid value: "-3": {_VALUE}'),  # a label value first
        (
            "n>-x",
            _U
            + "[values[0]: Invalid value: \"-x\": for 'Gt', 'Lt' operators, the value must be "
            + f'an integer, values[0][n]: Invalid value: "-x": {_VALUE}]',
        ),
        (
            "app=" + "x" * 64,
            _U + f'values[0][app]: Invalid value: "{"x" * 64}": must be no more than 63 bytes',
        ),
        # several bad values: the aggregate, in the sorted order of the set
        (
            "app in (-b,-a)",
            _U
            + f'[values[0][app]: Invalid value: "-a": {_VALUE}, '
            + f'values[1][app]: Invalid value: "-b": {_VALUE}]',
        ),
        # a key is quoted as Go's %q does
        ('a"b=c', _U + f'<nil>: Invalid value: "a\\"b": {_NAME_PART}'),
        ("a\tb=c", _U + "found 'b', expected: in, notin, =, ==, !=, gt, lt"),
        # a NUL where a token starts ends the input, as in Go's lexer
        ("a=b,\x00c", "found '', expected: identifier after ','"),
    ],
)
def test_label_selector_parse_errors_are_the_api_servers(selector: str, message: str) -> None:
    error = _label_error(selector)
    assert error.code == 400
    assert error.reason == "BadRequest"
    assert error.message == message


def test_label_selector_error_body_is_byte_exact() -> None:
    error = _label_error("a in")
    assert error.body == (
        b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
        b"\"message\":\"unable to parse requirement: found '' expected: '('\","
        b'"reason":"BadRequest","code":400}\n'
    )
    # Go's encoder escapes < and > (the key error's "<nil>" path)
    assert b'"message":"unable to parse requirement: \\u003cnil\\u003e: Invalid value:' in (
        _label_error("-a").body
    )


@pytest.mark.parametrize(
    ("selector", "canonical"),
    [
        ("", ""),
        ("  ", ""),
        ("a=b", "a=b"),
        ("a==b", "a==b"),
        ("a!=b", "a!=b"),
        ("a", "a"),
        ("!a", "!a"),
        ("a in (b,c)", "a in (b,c)"),
        ("a notin (c,b)", "a notin (b,c)"),
        ("x in (foo,,baz),y,z notin ()", "x in (,baz,foo),y,z notin ()"),
        ("a in (b,,)", "a in (,b)"),
        ("a notin (,)", "a notin ()"),
        ("a=", "a="),
        ("a>1,b<3", "a>1,b<3"),
        ("in in (in),notin", "in in (in),notin"),
        ("z=1,a=2,m", "a=2,m,z=1"),  # sorted by key, as labels.Parse sorts
        ("example.com/app=web", "example.com/app=web"),
        ("a=b\x00,c=d", "a=b,c=d"),  # a NUL ends an identifier
        (" a = b , c ", "a=b,c"),
    ],
)
def test_label_selector_parses(selector: str, canonical: str) -> None:
    parsed = parse_label_selector(selector)
    assert str(parsed) == canonical
    assert parsed.empty == (canonical == "")


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        ("app=web", {"app": "web"}, True),
        ("app=web", {"app": "db"}, False),
        ("app=web", {}, False),
        ("app==web", {"app": "web"}, True),
        ("app!=web", {"app": "db"}, True),
        ("app!=web", {}, True),  # != matches a missing key
        ("app!=web", {"app": "web"}, False),
        ("app in (web,db)", {"app": "db"}, True),
        ("app in (web,db)", {"app": "x"}, False),
        ("app in (web,db)", {}, False),
        ("app notin (web,db)", {}, True),
        ("app notin (web,db)", {"app": "web"}, False),
        ("app notin (web,db)", {"app": "x"}, True),
        ("app", {"app": ""}, True),
        ("app", {}, False),
        ("!app", {}, True),
        ("!app", {"app": "x"}, False),
        ("app=", {"app": ""}, True),
        ("n>3", {"n": "4"}, True),
        ("n>3", {"n": "3"}, False),
        ("n<3", {"n": "-1"}, True),
        ("n>3", {"n": "x"}, False),
        ("n>3", {}, False),
        ("app=web,tier", {"app": "web", "tier": "1"}, True),
        ("app=web,tier", {"app": "web"}, False),
    ],
)
def test_label_selector_matches_as_the_api_server(
    selector: str, labels: dict[str, str], expected: bool
) -> None:
    assert parse_label_selector(selector).matches(labels) is expected


def test_label_selector_exact_match_introspection() -> None:
    selector = parse_label_selector("app=web,tier in (a,b),x in (y)")
    assert selector.requires_exact_match("app") == "web"
    assert selector.requires_exact_match("tier") is None
    assert selector.requires_exact_match("x") == "y"
    assert selector.requires_exact_match("missing") is None


# ------------------------------------------------------------------------ hostile selectors
def test_a_huge_label_selector_is_refused_quickly() -> None:
    text = "a in (" + ",".join(["v"] * (MAX_SELECTOR_LENGTH // 2)) + ")"
    start = time.perf_counter()
    error = _label_error(text)
    assert time.perf_counter() - start < 0.5
    assert error.code == 400
    assert (
        error.message == f"labelSelector: Too long: must have at most {MAX_SELECTOR_LENGTH} bytes"
    )


def test_a_1mb_label_selector_parses_in_bounded_time_and_matches_in_constant_time() -> None:
    values = [f"v{i:06d}" for i in range(124_990)]  # ~ 1 MB: one `in` with many values
    text = "app in (" + ",".join(values) + ")"
    assert 900_000 < len(text) <= MAX_SELECTOR_LENGTH
    start = time.perf_counter()
    selector = parse_label_selector(text)
    assert time.perf_counter() - start < 5.0  # linear: ~0.3 s unloaded
    start = time.perf_counter()
    for _ in range(10_000):
        assert selector.matches({"app": "v124989"})
    assert time.perf_counter() - start < 1.0  # a frozenset lookup, not a scan


@pytest.mark.parametrize(
    "text",
    [
        "a" + "!=" * 400_000,
        "!" * 800_000,
        "(" * 800_000,
        "a in " + "(" * 800_000,
        "a=" + "=" * 800_000,
        "," * 800_000,
        "a in (" + "," * 800_000,
    ],
)
def test_deeply_repeated_operators_fail_fast(text: str) -> None:
    start = time.perf_counter()
    error = _label_error(text)
    assert error.code == 400
    assert time.perf_counter() - start < 2.0


def test_too_many_requirements_is_a_400() -> None:
    text = ",".join(f"k{i}=v" for i in range(MAX_REQUIREMENTS + 1))
    error = _label_error(text)
    assert error.message == (
        f"labelSelector: Too many: {MAX_REQUIREMENTS + 1}: must have at most {MAX_REQUIREMENTS} items"
    )
    assert (
        len(parse_label_selector(",".join(f"k{i}=v" for i in range(MAX_REQUIREMENTS))).requirements)
        == MAX_REQUIREMENTS
    )


def test_too_many_field_requirements_is_a_400() -> None:
    text = ",".join(f"metadata.name!=n{i}" for i in range(MAX_REQUIREMENTS + 1))
    with pytest.raises(ProxyStatusError) as info:
        parse_field_selector(text, PODS)
    assert info.value.message.startswith(f"fieldSelector: Too many: {MAX_REQUIREMENTS + 1}:")


def test_a_label_selector_with_surrogates_still_encodes() -> None:
    bad = "a\udcff=b"  # a byte that was not UTF-8, decoded with surrogateescape
    error = _label_error(bad)
    assert error.code == 400
    assert b"\\xff" in error.body  # %q writes the byte as Go does
    orjson.loads(error.body)  # and the body is valid JSON


# ---------------------------------------------------------------------------- field selectors
def _field_error(text: str, resource: Resource = PODS, **kw: Any) -> str:
    with pytest.raises(ProxyStatusError) as info:
        parse_field_selector(text, resource, **kw)
    assert info.value.code == 400
    assert info.value.reason == "BadRequest"
    return info.value.message


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a", "invalid selector: 'a'; can't understand 'a'"),
        ("metadata.name=a,c", "invalid selector: 'metadata.name=a,c'; can't understand 'c'"),
        ("metadata.name=b=c", "invalid field selector: unescaped character in value: 61"),
        ("metadata.name=b\\", "invalid field selector: invalid escape sequence: \\"),
        ("metadata.name=b\\x", "invalid field selector: invalid escape sequence: \\x"),
    ],
)
def test_field_selector_parse_errors(text: str, message: str) -> None:
    assert _field_error(text) == message


@pytest.mark.parametrize(
    ("resource", "text", "message"),
    [
        (PODS, "spec.foo=x", "field label not supported: spec.foo"),
        (PODS, "=x", "field label not supported: "),
        (NODES, "metadata.namespace=x", "field label not supported: metadata.namespace"),
        (
            parse_resource("namespaces"),
            "metadata.namespace=x",
            "field label not supported: metadata.namespace",
        ),
        (parse_resource("secrets"), "data=x", "field label not supported: data"),
        (parse_resource("events"), "regarding.name=x", "field label not supported: regarding.name"),
        (
            parse_resource("events.events.k8s.io"),
            "involvedObject.name=x",
            "field label not supported: involvedObject.name",
        ),
        (parse_resource("jobs"), "spec.x=1", 'field label "spec.x" not supported for Job'),
        (
            parse_resource("configmaps"),
            "data.x=1",
            '"data.x" is not a known field selector: only "metadata.name", "metadata.namespace"',
        ),
        # apps/v1 registers no conversion: ReplicaSets take metadata only
        (
            parse_resource("replicasets"),
            "status.replicas=1",
            '"status.replicas" is not a known field selector: only "metadata.name", "metadata.namespace"',
        ),
        (WIDGETS, "spec.color=red", "field label not supported: spec.color"),
        (CLUSTER_WIDGETS, "metadata.namespace=x", "field label not supported: metadata.namespace"),
        (
            Resource(
                group="resource.k8s.io",
                version="v1beta1",
                plural="resourceslices",
                kind="ResourceSlice",
                namespaced=False,
            ),
            "spec.pool=x",
            "field label not supported for resource.k8s.io/v1beta1, Kind=ResourceSlice: spec.pool",
        ),
    ],
)
def test_unsupported_field_labels_get_each_kinds_wording(
    resource: Resource, text: str, message: str
) -> None:
    assert _field_error(text, resource) == message


def test_the_first_bad_label_in_sorted_order_is_reported() -> None:
    assert _field_error("z.b=1,a.c=2") == "field label not supported: a.c"


def test_field_selector_escapes_and_operators() -> None:
    selector = parse_field_selector("metadata.name=a\\,b\\=c\\\\d", PODS)
    assert [(r.field, r.operator, r.value) for r in selector.requirements] == [
        ("metadata.name", "=", "a,b=c\\d")
    ]
    assert str(selector) == "metadata.name=a\\,b\\=c\\\\d"
    both = parse_field_selector("status.phase!=Running,spec.nodeName==n1", PODS)
    assert [(r.field, r.operator, r.value) for r in both.requirements] == [
        ("spec.nodeName", "=", "n1"),
        ("status.phase", "!=", "Running"),
    ]
    assert parse_field_selector(",", PODS).empty
    assert parse_field_selector("spec.host=n1", PODS).requirements[0].field == "spec.nodeName"


def _pod(**spec: Any) -> dict[str, Any]:
    pod = make_pod("web-1", "default", node="n1", phase="Running")
    pod["spec"].update(spec)
    return pod


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("metadata.name=web-1", True),
        ("metadata.name=web-2", False),
        ("metadata.namespace=default", True),
        ("metadata.namespace!=default", False),
        ("spec.nodeName=n1", True),
        ("spec.host=n1", True),
        ("spec.nodeName!=n1", False),
        ("status.phase=Running", True),
        ("status.phase=Pending", False),
        ("spec.restartPolicy=Always", True),
        ("spec.schedulerName=default-scheduler", True),
        ("spec.hostNetwork=false", True),  # absent reads as false
        ("spec.hostNetwork=true", False),
        ("status.podIPs=", True),  # accepted, never set: always ""
        ("status.nominatedNodeName=", True),
        ("spec.serviceAccountName=default", True),
    ],
)
def test_pod_fields_read_as_to_selectable_fields_reads_them(text: str, expected: bool) -> None:
    pod = _pod()
    pod["spec"].setdefault("restartPolicy", "Always")
    pod["spec"].setdefault("schedulerName", "default-scheduler")
    pod["spec"]["serviceAccountName"] = "default"
    assert parse_field_selector(text, PODS).matches(pod) is expected


def test_pod_ip_comes_from_pod_ip_or_the_first_pod_ips() -> None:
    selector = parse_field_selector("status.podIP=10.0.0.7", PODS)
    assert selector.matches({"status": {"podIP": "10.0.0.7"}})
    assert selector.matches({"status": {"podIPs": [{"ip": "10.0.0.7"}, {"ip": "fd00::7"}]}})
    assert not selector.matches({"status": {"podIPs": [{"ip": "fd00::7"}]}})
    host = parse_field_selector("spec.hostNetwork=true", PODS)
    assert host.matches({"spec": {"hostNetwork": True}})
    sa = parse_field_selector("spec.serviceAccountName=old", PODS)
    assert sa.matches({"spec": {"serviceAccount": "old"}})  # the deprecated alias


def test_other_kinds_fields() -> None:
    node = {"metadata": {"name": "n1"}, "spec": {}}
    assert parse_field_selector("spec.unschedulable=false", NODES).matches(node)
    assert parse_field_selector("spec.unschedulable=true", NODES).matches(
        {"metadata": {"name": "n1"}, "spec": {"unschedulable": True}}
    )
    secret = {"metadata": {"name": "s", "namespace": "d"}, "type": "kubernetes.io/tls"}
    assert parse_field_selector("type=kubernetes.io/tls", parse_resource("secrets")).matches(secret)
    ns = {"metadata": {"name": "d"}, "status": {"phase": "Terminating"}}
    assert parse_field_selector("status.phase=Terminating", parse_resource("namespaces")).matches(
        ns
    )
    job = {"metadata": {"name": "j"}, "status": {}}
    jobs = parse_resource("jobs")
    assert parse_field_selector("status.successful=0", jobs).matches(job)
    assert parse_field_selector("status.successful=2", jobs).matches({"status": {"succeeded": 2}})
    rc = parse_resource("replicationcontrollers")
    assert parse_field_selector("status.replicas=3", rc).matches({"status": {"replicas": 3}})
    svc = parse_resource("services")
    assert parse_field_selector("spec.type=ClusterIP,spec.clusterIP=None", svc).matches(
        {"spec": {"type": "ClusterIP", "clusterIP": "None"}}
    )
    csr = Resource(
        group="certificates.k8s.io",
        version="v1",
        plural="certificatesigningrequests",
        kind="CertificateSigningRequest",
        namespaced=False,
    )
    assert parse_field_selector("spec.signerName=kubernetes.io/kubelet-serving", csr).matches(
        {"spec": {"signerName": "kubernetes.io/kubelet-serving"}}
    )


def test_event_fields_core_and_events_k8s_io() -> None:
    core = {
        "metadata": {"name": "e", "namespace": "d"},
        "involvedObject": {"kind": "Pod", "name": "web-1", "namespace": "d", "uid": "u1"},
        "reason": "BackOff",
        "type": "Warning",
        "source": {"component": ""},
        "reportingComponent": "kubelet",
    }
    events = parse_resource("events")
    assert parse_field_selector(
        "involvedObject.kind=Pod,involvedObject.name=web-1,reason=BackOff,type=Warning", events
    ).matches(core)
    assert parse_field_selector("involvedObject.uid=u1", events).matches(core)
    # source falls back to the reporting controller, as ToSelectableFields does
    assert parse_field_selector("source=kubelet,reportingComponent=kubelet", events).matches(core)
    v1 = {
        "metadata": {"name": "e", "namespace": "d"},
        "regarding": {"kind": "Pod", "name": "web-1"},
        "reason": "BackOff",
        "type": "Normal",
        "reportingController": "kubelet",
        "deprecatedSource": {"component": "sched"},
    }
    ev1 = parse_resource("events.events.k8s.io")
    selector = parse_field_selector(
        "regarding.kind=Pod,regarding.name=web-1,reportingController=kubelet", ev1
    )
    assert [r.field for r in selector.requirements] == [
        "involvedObject.kind",
        "involvedObject.name",
        "reportingComponent",
    ]
    assert selector.matches(v1)
    assert parse_field_selector("source=sched,type=Normal", ev1).matches(v1)


def test_custom_resources_metadata_and_selectable_fields() -> None:
    obj = {
        "metadata": {"name": "w", "namespace": "d"},
        "spec": {"color": "red", "size": 3, "on": True},
    }
    assert parse_field_selector("metadata.namespace=d", WIDGETS).matches(obj)
    fields = parse_field_selector(
        "spec.color=red,spec.size=3,spec.on=true",
        WIDGETS,
        selectable_fields=[".spec.color", ".spec.size", ".spec.on"],
    )
    assert fields.matches(obj)
    assert not fields.matches({**obj, "spec": {"color": "blue", "size": 3, "on": True}})
    # an aggregated or unknown-group resource may be declared built-in: the generic rules
    assert (
        _field_error("spec.x=1", WIDGETS, custom=False)
        == '"spec.x" is not a known field selector: only "metadata.name", "metadata.namespace"'
    )


# ----------------------------------------------------------------------------- ObjectFilter
def _raw(obj: dict[str, Any]) -> bytes:
    return orjson.dumps(obj)


def test_object_filter_on_bytes_reads_metadata_only_when_it_can() -> None:
    pod = make_pod("web-1", "default", labels={"app": "web", "tier": "fe"}, node="n1")
    raw = _raw(pod)
    filt = ObjectFilter(
        "default",
        parse_label_selector("app=web"),
        parse_field_selector("metadata.name=web-1", PODS),
    )
    assert not filt.fields.needs_object
    assert filt.matches_raw(raw) and filt.matches(pod)
    assert not ObjectFilter("other").matches_raw(raw)
    assert not ObjectFilter(None, parse_label_selector("app=db")).matches_raw(raw)
    full = ObjectFilter(None, fields=parse_field_selector("spec.nodeName=n1", PODS))
    assert full.fields.needs_object
    assert full.matches_raw(raw)
    assert not ObjectFilter(
        None, fields=parse_field_selector("spec.nodeName=n2", PODS)
    ).matches_raw(raw)
    assert ObjectFilter().is_everything and ObjectFilter().matches_raw(b"not even json")
    assert ObjectFilter("default").key != ObjectFilter("other").key
    assert not ObjectFilter("default").filters_content
    assert ObjectFilter(labels=parse_label_selector("a")).filters_content


def test_object_filter_works_on_table_rows() -> None:
    row = b'{"cells":["web-1","1/1"],"metadata":{"name":"web-1","namespace":"default","labels":{"app":"web"}}}'
    assert ObjectFilter("default", parse_label_selector("app=web")).matches_raw(row)
    assert not ObjectFilter("default", parse_label_selector("app!=web")).matches_raw(row)


def test_object_filter_falls_back_for_odd_labels() -> None:
    raw = b'{"metadata":{"name":"x","labels":{"n":5}}}'  # not strings: msgspec refuses
    assert ObjectFilter(labels=parse_label_selector("!m")).matches_raw(raw)


def test_label_selector_matching_is_fast() -> None:
    selector = parse_label_selector("app=web,tier in (fe,be),!canary,env!=prod")
    labels = {"app": "web", "tier": "fe", "env": "dev"}
    start = time.perf_counter()
    for _ in range(100_000):
        selector.matches(labels)
    assert (time.perf_counter() - start) / 100_000 < 20e-6  # ~1 us unloaded


def test_the_projection_selects_as_the_whole_object_does() -> None:
    """A field selector decodes only the paths it reads: for every pod shape, matching the
    projection agrees with matching the decoded object."""
    selectors = [
        "spec.nodeName=n1",
        "spec.nodeName!=n1,status.phase=Running",
        "status.podIP=10.0.0.1",
        "spec.hostNetwork=true",
        "spec.serviceAccountName=sa",
        "metadata.namespace=default,spec.restartPolicy=Always",
    ]
    pods = []
    for i in range(24):
        pod = make_pod(
            f"p{i}", "default" if i % 2 else "other", node=f"n{i % 3}", labels={"i": str(i % 4)}
        )
        if i % 5 == 0:
            pod["spec"]["hostNetwork"] = True
        if i % 4 == 0:
            pod["status"] = {"podIPs": [{"ip": "10.0.0.1"}]}
        if i % 6 == 0:
            pod["spec"]["serviceAccount"] = "sa"
            pod["spec"].pop("serviceAccountName", None)
        if i == 7:
            pod["spec"] = "not an object"  # the projection refuses: the whole object is read
        pods.append(pod)
    for text in selectors:
        for labels in ("", "i=1", "i!=2"):
            filt = ObjectFilter(
                None, parse_label_selector(labels), parse_field_selector(text, PODS)
            )
            assert filt.fields.needs_object
            for pod in pods:
                assert filt.matches_raw(_raw(pod)) is filt.matches(pod), (
                    text,
                    labels,
                    pod["metadata"]["name"],
                )
    event = {
        "metadata": {"name": "e", "namespace": "d"},
        "source": {},
        "reportingComponent": "kubelet",
    }
    by_source = ObjectFilter(
        None, fields=parse_field_selector("source=kubelet", parse_resource("events"))
    )
    assert by_source.matches_raw(_raw(event))
