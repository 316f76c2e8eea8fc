"""The replay study's part of ``report.md``: every sentence computed from its result."""

from __future__ import annotations

from llmcache.replay import Figures

from ._results import ReplayBed, ReplayRow, ReplayStudyResult

__all__ = [
    "AUDITS_TO_CATCH",
    "AUDIT_CUT_SHARE",
    "AUDIT_SLACK",
    "COST_GOAL",
    "headline",
    "replay_lines",
]

#: The issue's goals for the town's recording: the overall cost cut, and the served answers
#: a category needs before its own bound is held to δ.
COST_GOAL = 0.60
MIN_SERVED = 50
#: The guard issue's goals for the audit guard on the town's recording: a share of the static
#: default's cut kept, a slack over δ for the served answers' upper bound, and the audits by
#: which a group over δ at the default is caught (the median over seeds).
AUDIT_CUT_SHARE = 0.90
AUDIT_SLACK = 2.0
AUDITS_TO_CATCH = 60
_NAMES = {
    "tuned": "tuned",
    "static": "static default",
    "exact": "exact repeats only",
    "audit": "audit guard",
    "prove": "proving guard",
    "serve": "serve mode",
    "random": "random answer",
}


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _pts(x: float | None) -> str:
    return "n/a" if x is None else f"{x:+.1f}"


def _excess(f: Figures) -> str:
    if not f.served:
        return "- (nothing served)"
    return f"{_pts(f.excess)} [{_pts(f.excess_low)}, {_pts(f.excess_upper)}]"


def _agree(f: Figures) -> str:
    # Paired: the model's second answers to the very queries served (what the excess is over).
    if f.paired and f.own_wrong_rate is not None:
        return f"{_pct(1 - f.own_wrong_rate)} of {f.served} served*"
    return "-" if f.agreement is None else f"{_pct(f.agreement)} of {f.pairs}"


def _embedding_note(result: ReplayStudyResult) -> str:
    if result.embedded is None or result.embeddings_at_hand is None:
        return "its embeddings not counted"
    return (
        f"{result.embedded:,} texts embedded, {result.embeddings_at_hand:,} vectors at hand "
        "(shipped with the recording, or kept from an earlier run in the same directory)"
    )


def _name(row: ReplayRow) -> str:
    """A row's configuration as the report names it (the lead row with its count of words)."""
    if row.config == "lead":
        return f"static default, first {row.lead_words} words exact"
    return _NAMES[row.config]


def _row(bed: ReplayBed, mode: str, config: str) -> ReplayRow | None:
    return next((r for r in bed.rows if r.mode == mode and r.config == config), None)


def _best_tuned(bed: ReplayBed) -> ReplayRow | None:
    tuned = [r for r in bed.rows if r.config == "tuned"]
    return max(tuned, key=lambda r: r.overall.cost_cut, default=None)


def headline(result: ReplayStudyResult) -> str | None:
    """The study's headline: the town recording's best tuned mode on the held-out run, beside
    the static default, serve mode and a random answer, the model named."""
    bed = next((b for b in result.beds if b.name == "town"), None)
    best = None if bed is None else _best_tuned(bed)
    if bed is None or best is None:
        return None
    o = best.overall
    parts = [
        f"on {bed.model}'s answers ({bed.split}), settings tuned for an excess bound of "
        f"{100 * result.delta:g} points cut the held-out run's cost by {_pct(o.cost_cut)} "
        f"({best.mode} mode, {o.served} of {o.calls} served, excess {_excess(o)} points over "
        "the model's own second answers)"
    ]
    static = _row(bed, best.mode, "static")
    lead = _row(bed, best.mode, "lead")
    audit = _row(bed, best.mode, "audit")
    serve = _row(bed, best.mode, "serve")
    rnd = _row(bed, "-", "random")
    if static is not None:
        parts.append(
            f"the static default threshold {_pct(static.overall.cost_cut)} "
            f"(excess {_excess(static.overall)})"
        )
    if lead is not None:
        parts.append(
            f"the same with the first {lead.lead_words} words exact "
            f"{_pct(lead.overall.cost_cut)} (excess {_excess(lead.overall)})"
        )
    if audit is not None:
        parts.append(
            f"the audit guard from the static default {_pct(audit.overall.cost_cut)} "
            f"(excess {_excess(audit.overall)})"
        )
    if serve is not None:
        parts.append(f"serve mode {_pct(serve.overall.cost_cut)} (excess {_excess(serve.overall)})")
    if rnd is not None:
        parts.append(f"a random same-table answer: excess {_excess(rnd.overall)}")
    return "; ".join(parts) + "."


def _goal_lines(result: ReplayStudyResult, bed: ReplayBed) -> list[str]:
    """Where the town's tuned settings meet the issue's goals, and where we are worse."""
    lines = []
    delta = 100 * result.delta
    for row in (r for r in bed.rows if r.config == "tuned"):
        o = row.overall
        bounded = o.excess_upper is not None and o.excess_upper <= delta
        cut_ok = o.cost_cut >= COST_GOAL
        verdict = (
            "meets the goal"
            if bounded and cut_ok
            else "misses the goal: "
            + ", ".join(
                ([] if cut_ok else [f"cost cut {_pct(o.cost_cut)} < {_pct(COST_GOAL)}"])
                + (
                    []
                    if bounded
                    else ["nothing served"]
                    if not o.served
                    else [f"excess upper bound {_pts(o.excess_upper)} > {delta:g} points"]
                )
            )
        )
        lines.append(
            f"{row.mode} mode, tuned: overall cost cut {_pct(o.cost_cut)} with the excess's "
            f"95% upper bound at {_pts(o.excess_upper)} points ({verdict}; goal: at least "
            f"{_pct(COST_GOAL)} at most {delta:g} points)."
        )
        for name, f in row.categories.items():
            if f.served < MIN_SERVED:
                continue
            if f.excess_upper is not None and f.excess_upper > delta:
                lines.append(
                    f"{row.mode} mode, {name}: {f.served} served with an excess upper bound of "
                    f"{_pts(f.excess_upper)} points, above {delta:g}: worse than the goal."
                )
    return lines


def _guard_lines(result: ReplayStudyResult, bed: ReplayBed) -> list[str]:
    """The guards against their goals: the audit guard's cut beside the static default's, its
    served answers' bound, and how soon it caught the groups the static default ran over δ."""
    lines = []
    delta = 100 * result.delta
    for audit in (r for r in bed.rows if r.config == "audit"):
        static = _row(bed, audit.mode, "static")
        o = audit.overall
        if static is not None and static.overall.cost_cut > 0:
            share = o.cost_cut / static.overall.cost_cut
            bound = o.excess_upper
            kept = share >= AUDIT_CUT_SHARE
            held = bound is not None and bound <= delta + AUDIT_SLACK
            lines.append(
                f"{audit.mode} mode, audit guard: cost cut {_pct(o.cost_cut)}, "
                f"{_pct(share)} of the static default's {_pct(static.overall.cost_cut)} "
                f"(goal: at least {_pct(AUDIT_CUT_SHARE)}: {'met' if kept else 'missed'}), "
                f"{o.audited} audits in the held-out run"
                + (
                    ""
                    if audit.asked_share is None
                    else f" ({_pct(audit.asked_share)} of its bill without a cache)"
                )
                + f", excess upper bound {_pts(bound)} "
                f"points (goal: at most {delta + AUDIT_SLACK:g}: {'met' if held else 'missed'})."
            )
        for name, f in audit.categories.items():
            if f.served >= MIN_SERVED and (f.excess_upper or 0.0) > delta + AUDIT_SLACK:
                lines.append(
                    f"{audit.mode} mode, audit guard, {name}: {f.served} served with an excess "
                    f"upper bound of {_pts(f.excess_upper)} points, above {delta + AUDIT_SLACK:g}."
                )
        if static is None:
            continue
        for name, f in static.categories.items():
            if f.excess is None or f.excess <= delta:
                continue
            story = audit.guards.get(name)
            if story is None:
                continue
            seeds = len(story.asked)
            moved = sum(m is not None for m in story.moved_after)
            closed = sum(story.closed)
            median = story.median_moved_after()
            caught = median is not None and moved > seeds / 2 and median <= AUDITS_TO_CATCH
            lines.append(
                f"{audit.mode} mode, {name} ran {_pts(f.excess)} points over the model at the "
                f"static default: the audit guard moved it up in {moved} of {seeds} seeded "
                f"replays ({closed} closed), "
                + (
                    f"after a median of {median:g} audits"
                    if median is not None
                    else f"never, over {max(story.asked)} audits at most"
                )
                + f" (goal: within {AUDITS_TO_CATCH}: {'met' if caught else 'missed'})."
            )
    for prove in (r for r in bed.rows if r.config == "prove"):
        o = prove.overall
        opened = [c for c, g in prove.guards.items() if g.moved_after[0] is not None]
        lines.append(
            f"{prove.mode} mode, proving guard: cost cut {_pct(o.cost_cut)}, {o.served} of "
            f"{o.calls} served ({o.identical} of them answers stored for the very same "
            f"prompt, served without a proof), {o.explored} explored in the held-out run; it "
            "proved a "
            f"threshold for {len(opened)} of {len(prove.guards)} categories"
            + (f" ({', '.join(opened)})." if opened else ".")
        )
    return lines


def _exact_lines(bed: ReplayBed) -> list[str]:
    """Serving exact repeats only, beside the tuned settings of the same mode."""
    lines = []
    for exact in (r for r in bed.rows if r.config == "exact"):
        o = exact.overall
        line = (
            f"{exact.mode} mode, exact repeats only ({exact.settings.get('all', '')}): cost cut "
            f"{_pct(o.cost_cut)}, {o.served} of {o.calls} served, excess {_excess(o)} points"
        )
        tuned = _row(bed, exact.mode, "tuned")
        if tuned is not None:
            gain = 100 * (tuned.overall.cost_cut - o.cost_cut)
            line += f"; the tuned settings cut {_pct(tuned.overall.cost_cut)}, " + (
                f"{gain:.1f} points more than exact repeats alone"
                if gain > 0
                else f"{-gain:.1f} points less than exact repeats alone"
                if gain < 0
                else "as much as exact repeats alone"
            )
        lines.append(line + ".")
    return lines


def _lead_lines(bed: ReplayBed) -> list[str]:
    """The static default with its leading words exact against the static default alone:
    overall, then each category where they served a different number of queries."""
    lines = []
    for lead in (r for r in bed.rows if r.config == "lead"):
        static = _row(bed, lead.mode, "static")
        o = lead.overall
        line = (
            f"{lead.mode} mode, {_name(lead)}: cost cut "
            f"{_pct(o.cost_cut)}, {o.served} of {o.calls} served, excess {_excess(o)} points"
        )
        if static is None:
            lines.append(line + ".")
            continue
        s = static.overall
        line += f"; the static default alone: {_pct(s.cost_cut)}, excess {_excess(s)}"
        moved = [
            f"{name} {_pct(static.categories[name].cost_cut)} → {_pct(f.cost_cut)} "
            f"(excess {_excess(static.categories[name])} → {_excess(f)})"
            for name, f in lead.categories.items()
            if name in static.categories and f.served != static.categories[name].served
        ]
        line += (
            ". By category, cut (and excess) from the static default: " + "; ".join(moved)
            if moved
            else "; the same number served in every category"
        )
        lines.append(line + ".")
    return lines


def _baseline_lines(bed: ReplayBed) -> list[str]:
    """Serve mode against a random answer, and what the excess is measured against."""
    lines = []
    serve = [r for r in bed.rows if r.config == "serve"]
    rnd = _row(bed, "-", "random")
    if rnd is not None and rnd.overall.served:
        for row in serve:
            s, r = row.overall, rnd.overall
            if row.categories == rnd.categories:
                lines.append(
                    f"{row.mode} serve mode served what a random same-table answer did, "
                    f"category by category (excess {_excess(s)})"
                    + (
                        ": the held-out agents' tables start empty (answers never cross "
                        "tables) and a serve-mode table stores only its misses, so each "
                        "served its first answer to every later query."
                        if bed.split.startswith("by agents")
                        else "."
                    )
                )
            elif s.served and s.excess_low is not None and r.excess_upper is not None:
                if s.excess_low > r.excess_upper:
                    lines.append(
                        f"{row.mode} serve mode is worse than a random same-table answer "
                        f"(excess {_excess(s)} against {_excess(r)})."
                    )
                elif (
                    s.excess_upper is not None
                    and r.excess_low is not None
                    and (s.excess_upper < r.excess_low)
                ):
                    lines.append(
                        f"{row.mode} serve mode is better than a random same-table answer "
                        f"(excess {_excess(s)} against {_excess(r)})."
                    )
                else:
                    lines.append(
                        f"{row.mode} serve mode cannot be told from a random same-table answer "
                        f"here (excess {_excess(s)} against {_excess(r)}: the intervals overlap)."
                    )
    alone = [] if rnd is None else [c for c, f in rnd.categories.items() if f.pairs == 0]
    if alone:
        lines.append(
            f"No second answer to the same prompt in the held-out part for {', '.join(alone)}: "
            "there the excess is over no measured spread (the model's own disagreement "
            "taken as 0), which makes the cache look worse than it is."
        )
    return lines


def _bed_table(bed: ReplayBed) -> list[str]:
    head = (
        "| mode | configuration | category | calls | served | cost cut | acceptable "
        "| model agrees | excess, points [95%] |"
    )
    lines = [head, "|" + "---|" * 9]
    for row in bed.rows:
        for name, f in [*row.categories.items(), ("all", row.overall)]:
            ok = f"{f.acceptable}/{f.served}" if f.served else "-"
            lines.append(
                f"| {row.mode} | {_name(row)} | {name} | {f.calls} | {f.served} | "
                f"{_pct(f.cost_cut)} | {ok} | {_agree(f)} | {_excess(f)} |"
            )
    return lines


def _settings(bed: ReplayBed) -> list[str]:
    out = []
    for row in bed.rows:
        if row.config == "tuned" and row.settings:
            chosen = "; ".join(f"{c}: {s}" for c, s in row.settings.items())
            out.append(f"- {row.mode} mode, chosen per category: {chosen}")
    return out


def _sample_lines(result: ReplayStudyResult) -> list[str]:
    lines = []
    for category, samples in result.samples.items():
        shown = "; ".join(
            f"{s.agent} on “{_short(', '.join(s.keywords))}”: `{_short(s.answer)}`" for s in samples
        )
        lines.append(f"- {category} ({result.answers.get(category, 0)} answers): {shown}")
    echoes = sum(result.placeholder_echoes.values())
    broken = sum(result.degenerate.values())
    total = sum(result.answers.values())
    where = ", ".join(f"{c} {n}" for c, n in result.placeholder_echoes.items() if n) or "none"
    degenerate_where = ", ".join(f"{c} {n}" for c, n in result.degenerate.items() if n) or "none"
    lines.append(
        f"- Of the held-out run's {total} answers, {echoes} echo their format's placeholder or "
        f"literal (by category: {where}) and {broken} are degenerate (a list of numbers, "
        f"runaway repetition; by category: {degenerate_where})."
    )
    return lines


def _short(text: str, width: int = 90) -> str:
    flat = " ".join(text.split()).replace("|", "\\|").replace("`", "'")
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _lead_words(result: ReplayStudyResult) -> int:
    """The leading words the study's lead rows held exact (0: no lead row)."""
    return max((r.lead_words for b in result.beds for r in b.rows if r.config == "lead"), default=0)


def replay_lines(result: ReplayStudyResult) -> list[str]:
    """The section's lines, the headline first."""
    top = headline(result)
    lines = [
        "**Headline** (replay study): " + (top or "no town recording was replayed."),
        "",
        "Each recording is replayed through the real cache with no LLM in the loop "
        "(`python -m experiments replay-study`; `llmcache.replay`): settings are tuned per "
        f"category on the first part for an excess at most {100 * result.delta:g} points "
        "(`llmcache.replay.tune`), and every configuration is reported on the held-out part "
        "beside the static default threshold"
        + (
            f" (in keyword mode also with the first {lead_words} words of the embedded text "
            "exact, `lead_words`)"
            if (lead_words := _lead_words(result))
            else ""
        )
        + ", both guards at the same δ (the audit guard "
        "and the proving guard, each from the static default, learning over the whole "
        "stream), serve mode (every query whose table has an "
        "entry answered with its nearest, the tables holding every answer of the tuning "
        "part) and a random same-table answer"
        + (
            ", and exact repeats only (a prompt's very text asked again) where a bed's "
            "table lists them"
            if any(r.config == "exact" for b in result.beds for r in b.rows)
            else ""
        )
        + ". The excess is the served answers' "
        "unacceptable share minus that of the model's own second answers, with its 95% "
        "interval: to the very queries served where each was recorded with a second answer "
        "(marked * in the tables: paired, Newcombe's interval for paired rates), else the "
        "disagreement of every recorded pair of answers to one prompt. "
        f"It took {result.seconds:.0f} s, {_embedding_note(result)}.",
    ]
    for bed in result.beds:
        lines += [
            "",
            f"### {bed.name.capitalize()}: {bed.model}",
            "",
            f"{bed.source}; {bed.split} ({bed.tune_calls} calls to tune on, "
            f"{bed.check_calls} held out); served answers graded by {bed.equivalence}.",
            "",
        ]
        calls = bed.tune_calls + bed.check_calls
        if bed.requirements_found is not None and bed.requirements_found < calls:
            lines.append(
                f"- Only {bed.requirements_found} of the {calls} calls were found in the town's "
                "runs: the others' answers are compared as written (an option named by its "
                "number is not read as the option it names)."
            )
        if bed.name == "town":
            lines += [f"- {line}" for line in _goal_lines(result, bed)]
        else:
            for row in (r for r in bed.rows if r.config == "tuned"):
                lines.append(
                    f"- {row.mode} mode, tuned: cost cut {_pct(row.overall.cost_cut)}, "
                    f"{row.overall.served} of {row.overall.calls} served, excess "
                    f"{_excess(row.overall)} points."
                )
        lines += [f"- {line}" for line in _lead_lines(bed)]
        lines += [f"- {line}" for line in _exact_lines(bed)]
        lines += [f"- {line}" for line in _guard_lines(result, bed)]
        lines += [f"- {line}" for line in _baseline_lines(bed)]
        lines += _settings(bed)
        lines += ["", *_bed_table(bed)]
    if result.samples:
        lines += [
            "",
            "### The held-out run's answers, for a reader to judge",
            "",
            *_sample_lines(result),
        ]
    return lines
