"""The report's picture of a ledger (each ledger's report_section draws its own with it): what each state means,
in words with its colour and the count across the rows, then an SVG bar per row label, its counts stacked by
state."""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any


def states_in_words(totals: Mapping[str, int], words: Mapping[str, tuple[str, str]], escape: Callable[[Any], str]
                    ) -> str:
    """A list (HTML) of the states, each with its colour, its total and what it means; `words`: {state: (colour,
    meaning)}."""
    return "<ul>" + "".join(f"<li><span style=\"color:{colour}\">&#9632;</span> {totals.get(state, 0):,} "
                            f"{escape(meaning)}</li>" for state, (colour, meaning) in words.items()) + "</ul>"


def stacked_bars(counts: Mapping[tuple[str, str], Mapping[str, Any]], words: Mapping[str, tuple[str, str]],
                 escape: Callable[[Any], str], width: int = 600) -> str:
    """An SVG bar per label of `counts` ({(broker, label): {state: count}}), its counts stacked in the order and
    colours of `words`; a bar's length is its total against the largest."""
    most = max((sum(c.get(s, 0) for s in words) for c in counts.values()), default=0) or 1
    out = [f"<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width + 180}\" height=\"{len(counts) * 20 + 4}\" "
           "role=\"img\">"]
    for i, ((broker, label), states) in enumerate(sorted(counts.items())):
        x = 160.0
        out.append(f"<text x=\"0\" y=\"{i * 20 + 13}\" font-size=\"12\">{escape(label)}</text>")
        for state, (colour, _) in words.items():
            w = states.get(state, 0) * width / most
            if w:
                out.append(f"<rect x=\"{x:.1f}\" y=\"{i * 20 + 2}\" width=\"{w:.1f}\" height=\"14\" fill=\"{colour}\">"
                           f"<title>{escape(broker)} {escape(label)} {state}: {states[state]}</title></rect>")
                x += w
    return "".join(out) + "</svg>"
