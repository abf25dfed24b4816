"""What JetStream needs from the server it runs in (``server.Server`` provides it)."""

from __future__ import annotations

from typing import Protocol

from jetraft.config import ServerConfig
from jetraft.server.cluster.mesh import RouteMesh
from jetraft.server.core.accounts import Account
from jetraft.server.core.auth import Authenticator
from jetraft.server.core.router import Router


class JsHost(Protocol):
    @property
    def config(self) -> ServerConfig: ...

    @property
    def name(self) -> str: ...

    @property
    def server_id(self) -> str: ...

    @property
    def auth(self) -> Authenticator: ...

    @property
    def router(self) -> Router: ...

    @property
    def mesh(self) -> RouteMesh | None:
        """The routes, when the server is in a cluster (JetStream is then clustered)."""
        ...

    @property
    def internal_account(self) -> Account:
        """An account no client can reach, for traffic between servers."""
        ...

    def account_named(self, name: str) -> Account | None: ...
