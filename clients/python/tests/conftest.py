"""The servers the tests run against: the real reactstep binary (``REACTSTEP_BIN``) offline, and
one whose OpenAI calls go to the mock upstream; each started once for the whole run. And
``kind``: a test that takes it runs once with each client, sync and async."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .support.drive import KINDS, Kind
from .support.service import Service, start_service
from .support.upstream import Upstream, start_upstream


@pytest.fixture(scope="session")
def service() -> Iterator[Service]:
    """The server, offline: steps take the model's output from ``mock_response``."""
    started = start_service()
    yield started
    started.stop()


@pytest.fixture(scope="session")
def upstream_server() -> Iterator[Upstream]:
    started = start_upstream()
    yield started
    started.close()


@pytest.fixture(scope="session")
def upstream_service(upstream_server: Upstream) -> Iterator[Service]:
    """The server with OpenAI at the mock upstream, no retries of its own, a heartbeat each second."""
    started = start_service(
        {
            "REACTSTEP_OPENAI_BASE_URL": upstream_server.base_url,
            "REACTSTEP_RETRIES": "0",
            "REACTSTEP_STREAM_HEARTBEAT_SECS": "1",
        }
    )
    yield started
    started.stop()


@pytest.fixture
def upstream(upstream_server: Upstream) -> Iterator[Upstream]:
    """The mock upstream, emptied for this test; it must have refused nothing the service sent."""
    upstream_server.reset()
    yield upstream_server
    assert upstream_server.refused == [], "the service sent what OpenAI would refuse"


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> Kind:
    value: Kind = request.param
    return value
