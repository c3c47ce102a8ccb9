"""Never imported in the tests: its declared dependency is missing."""

raise AssertionError("demo_group.cpu_fast must not be imported when its dependency is missing")
