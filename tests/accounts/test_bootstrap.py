import stat

import pytest

from accounts.services import admin_bootstrap

pytestmark = pytest.mark.django_db


def test_initial_admin_gets_a_random_password_written_0600(tmp_path, django_user_model):
    created = admin_bootstrap(data_dir=tmp_path)
    assert created is not None
    username, password = created
    assert len(password) >= 20
    admin = django_user_model.objects.get(username=username)
    assert admin.is_superuser and admin.is_staff
    assert admin.check_password(password)
    marker = tmp_path / "initial_admin.txt"
    assert stat.S_IMODE(marker.stat().st_mode) == 0o600
    assert password in marker.read_text()


def test_initial_admin_is_not_recreated(tmp_path, django_user_model):
    username, _ = admin_bootstrap(data_dir=tmp_path)
    django_user_model.objects.filter(username=username).delete()
    assert admin_bootstrap(data_dir=tmp_path) is None
    assert not django_user_model.objects.filter(username=username).exists()


def test_two_installs_get_different_admin_passwords(tmp_path, django_user_model):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    _, first = admin_bootstrap(data_dir=tmp_path / "a")
    django_user_model.objects.all().delete()
    _, second = admin_bootstrap(data_dir=tmp_path / "b")
    assert first != second
