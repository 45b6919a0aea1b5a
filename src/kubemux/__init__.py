"""kubemux: live, cached views of Kubernetes resources across every kubeconfig context.

The public surface is this module, :mod:`kubemux.testing` and the ``kubemux`` command.
"""

from __future__ import annotations

from . import share as share  # kubemux.share.Redis(...); imports no Redis client
from ._auth.pool import CredentialPool as CredentialPool
from ._auth.pool import CredentialStatus as CredentialStatus
from ._cache.event_index import EventIndex as EventIndex
from ._cache.event_index import EventIndexStatistics as EventIndexStatistics
from ._cache.multistore import MultiStore as MultiStore
from ._cache.multistore import MultiTableStore as MultiTableStore
from ._cache.store import EventHistory as EventHistory
from ._cache.store import HistoryEvent as HistoryEvent
from ._cache.store import Indexer as Indexer
from ._cache.store import Store as Store
from ._cache.store import StoreSizes as StoreSizes
from ._cache.store import StoreSnapshot as StoreSnapshot
from ._cache.store import StoreWriter as StoreWriter
from ._cache.store import Transform as Transform
from ._cache.store import by_label as by_label
from ._cache.store import by_owner as by_owner
from ._cache.store import drop_managed_fields as drop_managed_fields
from ._cache.stream import StoreListener as StoreListener
from ._cache.table import TableColumn as TableColumn
from ._cache.table import TableRow as TableRow
from ._cache.table import TableStore as TableStore
from ._cache.table import TableWriter as TableWriter
from ._errors import ApiError as ApiError
from ._errors import ClusterUnreachable as ClusterUnreachable
from ._errors import ContextNotFound as ContextNotFound
from ._errors import ContextRemoved as ContextRemoved
from ._errors import CredentialError as CredentialError
from ._errors import Forbidden as Forbidden
from ._errors import InternalError as InternalError
from ._errors import InvalidContext as InvalidContext
from ._errors import KubeconfigError as KubeconfigError
from ._errors import KubemuxError as KubemuxError
from ._errors import NotSynced as NotSynced
from ._errors import ProtocolError as ProtocolError
from ._errors import RegistryClosed as RegistryClosed
from ._errors import ResourceExpired as ResourceExpired
from ._errors import ResourceNotFound as ResourceNotFound
from ._errors import ResponseTooLarge as ResponseTooLarge
from ._errors import ServerTimeout as ServerTimeout
from ._errors import StartTimeout as StartTimeout
from ._errors import SubscriberOverflow as SubscriberOverflow
from ._errors import TooManyOpenFiles as TooManyOpenFiles
from ._errors import Unauthorized as Unauthorized
from ._errors import UnknownResource as UnknownResource
from ._kubeconfig.load import ContextConfig as ContextConfig
from ._kubeconfig.load import KubeconfigSnapshot as KubeconfigSnapshot
from ._kubeconfig.load import load_kubeconfig as load_kubeconfig
from ._kubeconfig.source import ContextDiff as ContextDiff
from ._kubeconfig.source import KubeconfigSource as KubeconfigSource
from ._registry.fanout import Change as Change
from ._registry.fanout import Subscription as Subscription
from ._registry.registry import WatcherRegistry as WatcherRegistry
from ._registry.status import ContextState as ContextState
from ._registry.status import ContextStatus as ContextStatus
from ._registry.status import RegistryStatus as RegistryStatus
from ._resources import Resource as Resource
from ._resources import parse_resource as parse_resource
from ._resources import register_resource as register_resource
from ._runtime import __version__ as __version__
from ._runtime import raise_fd_limit as raise_fd_limit
from ._settings import Backoff as Backoff
from ._settings import WatchSettings as WatchSettings
from ._wire.codec import StoreChange as StoreChange
from ._wire.types import InformerState as InformerState
from ._wire.types import InformerStatus as InformerStatus
from ._wire.types import View as View

__all__ = [
    "ApiError",
    "Backoff",
    "Change",
    "ClusterUnreachable",
    "ContextConfig",
    "ContextDiff",
    "ContextNotFound",
    "ContextRemoved",
    "ContextState",
    "ContextStatus",
    "CredentialError",
    "CredentialPool",
    "CredentialStatus",
    "EventHistory",
    "EventIndex",
    "EventIndexStatistics",
    "Forbidden",
    "HistoryEvent",
    "Indexer",
    "InformerState",
    "InformerStatus",
    "InternalError",
    "InvalidContext",
    "KubeconfigError",
    "KubeconfigSnapshot",
    "KubeconfigSource",
    "KubemuxError",
    "MultiStore",
    "MultiTableStore",
    "NotSynced",
    "ProtocolError",
    "RegistryClosed",
    "RegistryStatus",
    "Resource",
    "ResourceExpired",
    "ResourceNotFound",
    "ResponseTooLarge",
    "ServerTimeout",
    "StartTimeout",
    "Store",
    "StoreChange",
    "StoreListener",
    "StoreSizes",
    "StoreSnapshot",
    "StoreWriter",
    "SubscriberOverflow",
    "Subscription",
    "TableColumn",
    "TableRow",
    "TableStore",
    "TableWriter",
    "TooManyOpenFiles",
    "Transform",
    "Unauthorized",
    "UnknownResource",
    "View",
    "WatchSettings",
    "WatcherRegistry",
    "by_label",
    "by_owner",
    "drop_managed_fields",
    "load_kubeconfig",
    "parse_resource",
    "raise_fd_limit",
    "register_resource",
]
