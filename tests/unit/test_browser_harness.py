"""The browser tier's wait for a new page (tests/browser/harness.py old_page_gone): chromedriver
answers an element of a page the tab has left in two ways, and both mean the page is gone. CI failed
(2026-12-06) when Selenium's `staleness_of` raised on the second instead of counting it."""

from __future__ import annotations

import pytest
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException

from tests.browser.harness import old_page_gone

# chromedriver's message in that CI run, as it came
INSPECTOR = ('unknown error: unhandled inspector error: {"code":-32000,"message":"Node with given id does not '
             'belong to the document"}')


class Element:
    """What the wait asks of the sign-in button: `is_enabled`, answered as chromedriver did."""

    def __init__(self, error: Exception | None) -> None:
        self.error = error

    def is_enabled(self) -> bool:
        if self.error is not None:
            raise self.error
        return True


def test_an_element_of_the_page_still_shown_is_not_gone() -> None:
    assert old_page_gone(Element(None)) is False


def test_a_stale_reference_is_gone() -> None:
    assert old_page_gone(Element(StaleElementReferenceException("stale element reference"))) is True


def test_a_node_of_a_document_the_tab_has_left_is_gone() -> None:
    assert old_page_gone(Element(WebDriverException(INSPECTOR))) is True


def test_any_other_driver_error_is_raised() -> None:
    with pytest.raises(WebDriverException, match="chrome not reachable"):
        old_page_gone(Element(WebDriverException("unknown error: chrome not reachable")))
