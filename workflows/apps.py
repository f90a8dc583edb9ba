from django.apps import AppConfig


class WorkflowsConfig(AppConfig):
    name = "workflows"
    verbose_name = "Workflows"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Imported once the app registry is ready: these modules import the models.
        from agentsite.agent.model_sources import register_model_source
        from agentsite.agent.tools import registry
        from agentsite.core.meta import register_section
        from agentsite.core.processes import on_process_death
        from agentsite.core.startup import on_service_start
        from organisation.policy import ResourceKind, register
        from workflows.models import Workflow
        from workflows.nodes import describe_node_types
        from workflows.runs import WorkflowModelSource, WorkflowToolSource
        from workflows.services import runs_mark_crashed, runs_prune_schedule_ensure, workflow_transfer

        # Each workflow is the tool workflow__<name> (the agent, MCP clients and other workflows call it) and
        # the /v1 model workflow:<name>.
        registry.register_source(WorkflowToolSource())
        register_model_source(WorkflowModelSource())
        register_section("node_types", describe_node_types)
        # Shared through its access rule: viewers run it (as themselves), editors also save versions.
        register(ResourceKind(kind="workflow", model=Workflow, label="workflow", transfer=workflow_transfer))
        on_process_death("workflow runs", runs_mark_crashed)
        on_service_start("workflow run retention schedule", runs_prune_schedule_ensure)
