"""pytest configuration: the tests import shared paths from :mod:`tests.helpers`."""
