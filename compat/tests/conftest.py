"""Shared fixtures: one fresh Weir server per test module.

Every test module gets its own server with an empty data directory on an
ephemeral port.  Tests that restart or crash the server use ``weir.restart()``,
``weir.stop()``, ``weir.kill()`` and ``weir.start()``; the server comes back on
the same data directory and port.

When a test fails, the tail of the server log is attached to the report.
"""

from __future__ import annotations

import re

import pytest

from clients import drop_admin_client
from harness import ExternalBroker, WeirServer, external_bootstrap, weir_binary


@pytest.fixture(scope="module")
def weir(request, tmp_path_factory):
    """A running broker; a fresh Weir server unless COMPAT_BOOTSTRAP is set."""
    bootstrap = external_bootstrap()
    if bootstrap:
        yield ExternalBroker(bootstrap)
        return

    name = re.sub(r"[^A-Za-z0-9_]+", "_", request.module.__name__)[-40:]
    workdir = tmp_path_factory.mktemp(f"weir_{name}")
    server = WeirServer(
        binary=weir_binary(),
        data_dir=workdir / "data",
        log_path=workdir / "weir.log",
    )
    server.start()
    try:
        yield server
    finally:
        if server.bootstrap:
            drop_admin_client(server.bootstrap)
        code = server.close()
        if code not in (None, 0):
            pytest.fail(
                f"weir exited with code {code} on SIGTERM at the end of {request.module.__name__}\n"
                + server.log_tail(),
                pytrace=False,
            )


@pytest.fixture
def restartable_weir(weir):
    """The module's server, for tests that must stop, restart or kill it."""
    if not weir.can_restart:
        pytest.skip("the broker is external (COMPAT_BOOTSTRAP); restart and crash tests need a managed server")
    return weir


@pytest.fixture
def bootstrap(weir) -> str:
    """The bootstrap address of the module's broker."""
    assert weir.is_running(), "the module's server is not running (an earlier test left it stopped)"
    return weir.bootstrap


@pytest.fixture
def weir_only(weir):
    """Skip assertions about Weir-specific behaviour when testing an external broker."""
    if weir.is_external:
        pytest.skip("checks Weir-specific behaviour; the broker is external (COMPAT_BOOTSTRAP)")
    return weir


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed and "weir" in getattr(item, "fixturenames", ()):
        server = item.funcargs.get("weir") if hasattr(item, "funcargs") else None
        if server is not None and not server.is_external:
            report.sections.append(("weir server log", server.log_tail(150)))


@pytest.fixture(scope="module")
def make_weir(request, tmp_path_factory):
    """Starts dedicated servers with their own settings (WEIR_* environment, an open-file
    limit, a data directory); each is stopped with SIGTERM at the end of the module and must
    exit 0."""
    if external_bootstrap():
        pytest.skip("starts its own servers with custom settings; the broker is external (COMPAT_BOOTSTRAP)")
    servers: list[WeirServer] = []

    def make(name: str, env: dict[str, str] | None = None, open_files: int | None = None, data_dir=None) -> WeirServer:
        workdir = tmp_path_factory.mktemp(f"weir_{name}")
        server = WeirServer(
            binary=weir_binary(),
            data_dir=data_dir or workdir / "data",
            log_path=workdir / "weir.log",
            env=env,
            open_files=open_files,
        )
        servers.append(server)
        server.start()
        return server

    yield make
    failures = []
    for server in servers:
        if server.bootstrap:
            drop_admin_client(server.bootstrap)
        code = server.close()
        if code not in (None, 0):
            failures.append(f"{server.log_path}: exit code {code}\n{server.log_tail(60)}")
    if failures:
        pytest.fail("a dedicated server did not stop cleanly:\n" + "\n".join(failures), pytrace=False)


# The modules that take longest, slowest first (seconds of one run on two cores, setup and
# teardown included). Modules run in this order ahead of the rest, so that with several
# workers the longest starts first rather than last (scripts/test.sh passes
# --no-loadscope-reorder, which keeps this order). Only the order depends on this list; a
# module missing from it still runs.
SLOWEST_MODULES = (
    "test_transactions",  # 201
    "test_streams",  # 144
    "test_client_matrix",  # 116
    "test_http",  # 110
    "test_sasl",  # 107
    "test_cluster",  # 88
    "test_faults",  # 88
    "test_resources",  # 79
    "test_attacks",  # 76
    "test_console",  # 72
    "test_tls",  # 64
    "test_replication",  # 62
    "test_differential",  # 56
    "test_cli",  # 44
    "test_groups",  # 42
)


def pytest_collection_modifyitems(session, config, items):
    rank = {name: index for index, name in enumerate(SLOWEST_MODULES)}
    items.sort(key=lambda item: rank.get(item.module.__name__.rpartition(".")[2], len(rank)))
