from django.db import migrations

# MCP servers take the organisation's access rule (organisation.policy): each server's old rule becomes the new
# one it meant, so everyone sees after the upgrade exactly what they saw before (tests/mcpbridge/
# test_upgrade_access.py): `admins` is `private` (owner null: admins only), `everyone` stays, `users` is `shared`
# with one `viewer` grant per user named. Every server's owner is null: the deployment's.
OLD_TO_NEW = {"admins": "private", "everyone": "everyone", "users": "shared"}
NEW_TO_OLD = {new: old for old, new in OLD_TO_NEW.items()}


def rules_forward(apps, schema_editor):
    server_model = apps.get_model("mcpbridge", "McpServer")
    grant_model = apps.get_model("mcpbridge", "McpServerGrant")
    for server in server_model.objects.all():
        server.visibility = OLD_TO_NEW.get(server.visibility, "private")  # anything unknown: the safe choice
        server.owner = None
        server.save(update_fields=["visibility", "owner"])
        if server.visibility == "shared":
            grant_model.objects.bulk_create([grant_model(resource=server, user=user, role="viewer")
                                             for user in server.users.all()])


def rules_backward(apps, schema_editor):
    """Back to the older rule: a user's grant names them again; a group's has no older form and is dropped (its
    members lose the server, which errs on the side of admins only)."""
    server_model = apps.get_model("mcpbridge", "McpServer")
    grant_model = apps.get_model("mcpbridge", "McpServerGrant")
    for server in server_model.objects.all():
        server.visibility = NEW_TO_OLD.get(server.visibility, "admins")
        server.save(update_fields=["visibility"])
        if server.visibility == "users":
            server.users.set(grant_model.objects.filter(resource=server, user__isnull=False)
                             .values_list("user_id", flat=True))


class Migration(migrations.Migration):

    dependencies = [
        ('mcpbridge', '0004_shareable'),
    ]

    operations = [
        migrations.RunPython(rules_forward, rules_backward),
    ]
