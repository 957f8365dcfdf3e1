import unittest


class Smoke(unittest.TestCase):
    def test_the_tests_run(self):
        self.assertTrue(True)
