import pytest

pytest.register_assert_rewrite("tests.services", "tests.support")
