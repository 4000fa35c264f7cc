"""The live buttons of a confirmation card (docs/jupyter-display.md#confirmation-cards),
and the placer of the cells a click proposes (jupyter/proposals.py)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lily_kernel.agent.pending import HeldCall, PendingItem
from lily_kernel.commands.results import ActionCard
from lily_kernel.commands.sanitize import html_text
from lily_kernel.errors import error_line
from lily_kernel.jupyter import proposals
from lily_kernel.jupyter.display import card_bundle, outcome_parts


class CardButtons:
    """The live buttons of a card in a notebook, a display of their own under the card.

    A typed action: Confirm / Cancel. A held call: Run once / Always this session (not for
    run_python) / Deny. A click decides through ``decide(action, ok, always)`` (the same
    path as ``/confirm``) and writes the outcome into the card's display (``handle``, an
    update by display id, which a front end applies to the card's cell and saves with the
    notebook). A further card the outcome holds takes over the buttons (``shown(card)``
    tells the runner it is displayed). :meth:`deactivate` greys them out once the card is
    decided another way (``/confirm``, ``/cancel``, a new request).
    """

    def __init__(self, card: ActionCard, handle: Any,
                 decide: Callable[[PendingItem, bool, bool], object],
                 shown: Callable[[ActionCard], None] | None = None) -> None:
        import ipywidgets as w
        self._w = w
        self.handle, self.decide, self.shown = handle, decide, shown
        self.status = w.HTML()
        self.row = w.HBox()
        self.view = w.VBox([self.row, self.status])
        self.first = card
        self.outcomes: list[tuple[str, str, str]] = []
        self.proposed: list[str] = []  # the cells the clicks proposed, for the placer
        self._said = 0  # how many of the placer's notes the card already says
        self.placer: Any = None  # placed below the card's cell by the front end (proposals.py)
        if proposals.available():
            self.placer = proposals.placer(self.view.model_id, (), self._placed)
            self.view.children = (self.row, self.status, self.placer)
        self._arm(card)

    @property
    def model_id(self) -> str:
        """The widget model id of the buttons' view."""
        model_id: str = self.view.model_id
        return model_id

    def bundle(self) -> dict[str, Any]:
        """The buttons' display: the widget, and empty text for consoles and logs."""
        return {"text/plain": "", "application/vnd.jupyter.widget-view+json": {
            "version_major": 2, "version_minor": 0, "model_id": self.view.model_id}}

    def _arm(self, card: ActionCard) -> None:
        w = self._w
        self.card = card
        call = isinstance(card.action, HeldCall)
        fit = {"layout": w.Layout(width="auto")}  # a fixed width cuts "Always this session"
        yes = w.Button(description="Run once" if call else "Confirm", button_style="success",
                       icon="check", **fit)
        no = w.Button(description="Deny" if call else "Cancel", icon="times", **fit)
        self.buttons = [yes]
        if isinstance(card.action, HeldCall) and card.action.always_refusal is None:
            always = w.Button(description="Always this session", icon="check-double", **fit)
            always.on_click(self._click(True, always=True))
            self.buttons.append(always)
        self.buttons.append(no)
        yes.on_click(self._click(True))
        no.on_click(self._click(False))
        self.row.children = tuple(self.buttons)

    def deactivate(self, note: str) -> None:
        """The card was decided another way: the buttons go inactive, with ``note``."""
        for b in self.buttons:
            b.disabled = True
            b.button_style = ""  # no choice looks made here
        if self.handle is None:
            self.status.value = f"<p>{html_text(note)}</p>"
        else:  # said once, in the card, which the saved notebook keeps too
            self.handle.update(card_bundle(self.first, tuple(self.outcomes), note), raw=True)

    def _update(self) -> None:
        if self.handle is not None:
            self.handle.update(card_bundle(self.first, tuple(self.outcomes)), raw=True)

    def _placed(self, notes: list[str]) -> None:
        """The front end placed the proposed cells: the card says where."""
        line = proposals.where(notes[self._said:])
        self._said = len(notes)
        if not line:
            return
        self.outcomes.append((line, line, f"<p>{html_text(line)}</p>"))
        self._update()

    def _chosen(self, button: Any) -> None:
        """The buttons after a click decided the card: all disabled, the chosen one marked."""
        for b in self.buttons:
            b.disabled, b.button_style = True, ""
        button.button_style, button.icon = "info", "check"
        button.description = f"{button.description} (chosen)"

    def _click(self, ok: bool, always: bool = False) -> Callable[[Any], None]:
        def handler(button: Any) -> None:
            for b in self.buttons:
                b.disabled = True
            self.status.value = ""
            try:
                outcome = self.decide(self.card.action, ok, always)
            except Exception as exc:  # one readable line, never a traceback
                line = error_line(exc)
                still = "still waiting" in line or "to retry" in line
                for b in self.buttons:
                    b.disabled = not still
                self.status.value = f"<p style='color:#b00'>{html_text(line)}</p>"
                return
            self._chosen(button)
            self.outcomes.append(outcome_parts(outcome))
            self._update()
            codes = getattr(outcome, "proposed", ())
            if codes and self.placer is not None:
                self.proposed += codes
                self.placer.proposals = list(self.proposed)
            further = getattr(outcome, "card", None)
            if further is not None:
                if self.shown is not None:
                    self.shown(further)
                self._arm(further)
        return handler
