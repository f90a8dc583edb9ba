from django.apps import AppConfig


class AgentsiteConfig(AppConfig):
    name = "agentsite"
    verbose_name = "agentsite"

    def ready(self) -> None:
        # Once the app registry is ready: the task queue (django-q2) and tracing read settings when imported.
        from agentsite.core import metrics, taskqueue, tracing
        from agentsite.server.orphan import guard_if_child_of_serve

        metrics.on_scrape("task queue", taskqueue.queue_depth)

        tracing.configure()  # on only with OTEL_EXPORTER_OTLP_ENDPOINT and the [otel] extra
        taskqueue.connect_trace_hooks()  # a queued task's trace context, picked up in the worker
        _request_signals_at_the_end_only()
        guard_if_child_of_serve()
        _runtime_lists_in_meta()


def _runtime_lists_in_meta() -> None:
    """The runtime's registries in GET /api/meta: the shell ties them to the kernel (the runtime imports no
    app config of its own, and the kernel imports no runtime)."""
    # Imported here: the runtime's modules need the app registry, which is ready only now.
    from agentsite.agent.configfields import describe_config_fields
    from agentsite.agent.providers import describe_providers
    from agentsite.agent.tools import registry
    from agentsite.core.meta import register_section

    register_section("providers", describe_providers)
    register_section("tool_sources", registry.describe_sources)
    register_section("config_fields", describe_config_fields)


def _request_signals_at_the_end_only() -> None:
    """Django runs `reset_queries` and `close_old_connections` when a request starts and `close_old_connections`
    when it ends. Both are sync receivers: on the ASGI handler each signal with one costs a crossing to the
    request's thread, the start one on every request, even an async view's that never touches that thread.

    With the request threads reused (agentsite/server/requestthreads.py) the start one is redundant: the same thread
    ran the previous request's end hook, which already closed any connection that failed, and there is no
    connection age (CONN_MAX_AGE=None) or health check (CONN_HEALTH_CHECKS off) for it to act on. So both run
    at the end only, inside the crossing Django makes anyway to close the response.
    """
    # Called from ready() only: kept beside the one caller.
    from django.core import signals
    from django.db import close_old_connections, reset_queries

    signals.request_started.disconnect(close_old_connections)
    signals.request_started.disconnect(reset_queries)
    signals.request_finished.connect(reset_queries)
