"""Test-only helpers shared by the unit, integration and end-to-end suites."""
