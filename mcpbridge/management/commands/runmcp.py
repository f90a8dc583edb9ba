"""manage.py runmcp: this service's tools as an MCP server on stdin/stdout (for Claude Desktop, IDEs, agents)."""

from __future__ import annotations

import logging

import anyio
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from mcp.server.stdio import stdio_server

from accounts.services import INITIAL_ADMIN_USERNAME
from mcpbridge.server import build_server

logger = logging.getLogger(__name__)


class Command(BaseCommand):
    help = ("Serve MCP (JSON-RPC 2.0) on stdin/stdout: the built-in tools, kb_search and every tool the "
            "registry holds, acting as --user. Only protocol goes to stdout; logs go to stderr.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--user", default=INITIAL_ADMIN_USERNAME,
                            help="The user the tools act for (whose knowledge base kb_search reads). "
                                 f"Default: {INITIAL_ADMIN_USERNAME}.")

    def handle(self, *args, user: str, **options) -> None:
        account = get_user_model().objects.filter(username=user, is_active=True).first()
        if account is None:
            raise CommandError(f"There is no active user named {user!r}; pass --user <username>.")
        server = build_server(user_id=account.pk)
        logger.info("Serving MCP on stdio as %r", account.get_username())

        async def serve() -> None:
            # stdio_server points fd 1 at stderr while it serves, so a stray print cannot corrupt the protocol.
            async with stdio_server() as (read_stream, write_stream):
                await server.run(read_stream, write_stream, server.create_initialization_options())

        try:
            anyio.run(serve)
        except KeyboardInterrupt:
            pass
