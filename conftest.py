"""Project-wide pytest configuration: Hypothesis profiles (select one with
--hypothesis-profile=ci|dev)."""

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", max_examples=50, deadline=None)
settings.load_profile("dev")
