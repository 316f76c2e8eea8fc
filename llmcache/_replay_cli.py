"""``python -m llmcache replay RECORDING`` and ``python -m llmcache tune RECORDING``."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from ._embedders import StoredEmbedder, default_embedder
from ._errors import ConfigurationError, LLMCacheError, ReplayInputError
from ._hash_embedder import HashEmbedder
from ._progress import ProgressBar
from ._replay import embedding_texts, replay
from ._replay_calls import ReplayCall, ReplayInput, read_calls, read_recording
from ._tune import DEFAULT_LEAD_WORDS, DEFAULT_THRESHOLDS, tune
from ._types import EmbedMode

__all__ = ["replay_main", "tune_main"]


def _default_store() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(root) / "llmcache" / "replay-embeddings"


def _looks_recorded(path: Path) -> bool:
    """Whether a file is the library's own recording (its lines carry ``response`` and
    ``model``), rather than plain calls (``answer``)."""
    import gzip

    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as lines:
            for line in lines:
                if line.strip():
                    first = json.loads(line)
                    return isinstance(first, dict) and "response" in first and "answer" not in first
    except (OSError, ValueError):
        return False
    return False


def _read(path: Path, form: str, strict: bool) -> ReplayInput:
    if not path.exists():
        raise ConfigurationError(f"no such file: {path}")
    if form == "auto":
        form = "recording" if _looks_recorded(path) else "jsonl"
    if form == "recording":
        return read_recording(path)
    return read_calls(path, strict=strict)


def _embedder(args: argparse.Namespace) -> StoredEmbedder:
    inner = HashEmbedder() if args.embedder == "hash" else default_embedder()
    store = None if args.embeddings == "none" else Path(args.embeddings)
    return StoredEmbedder(inner, store)


def warm(
    embedder: StoredEmbedder,
    calls: Sequence[ReplayCall],
    modes: Sequence[EmbedMode],
    progress: Callable[[int, int], None] | None = None,
) -> int:
    """Embed, in batches, every text the replays of ``calls`` in ``modes`` will look up."""
    texts = embedding_texts(calls, modes)
    # Longest first, 64 at a time: each batch holds texts of about one length (what the
    # embedder's own sorting did within 256) and a bar moves every few seconds, not every
    # 256 texts; the rate only rises, so an early ETA errs long.
    texts.sort(key=len, reverse=True)
    return embedder.warm(texts, batch=64, progress=progress)


def _bar(label: str, args: argparse.Namespace) -> ProgressBar:
    # On a terminal only (ProgressBar looks), and never beside --json: a program reads that.
    return ProgressBar(label, enabled=not args.json)


def _remedy(exc: BaseException) -> str:
    """What to do about a file with malformed lines, beside the lines' own reasons."""
    if isinstance(exc, ReplayInputError) and exc.good:
        return f"\n(correct those lines, or pass --skip-malformed to use the {exc.good} good ones)"
    return ""


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("recording", type=Path, help="a recording (.jsonl/.jsonl.gz) or calls")
    parser.add_argument(
        "--format",
        choices=("auto", "recording", "jsonl"),
        default="auto",
        help="recording: what llmcache's Recorder wrote; jsonl: plain calls, one a line "
        '({"category", "agent", "prompt" or "messages", "keywords", "answer", "time"}); '
        "auto (default): told apart by the first line",
    )
    parser.add_argument(
        "--skip-malformed",
        action="store_true",
        help="skip and count malformed lines of a jsonl file instead of refusing the file",
    )
    parser.add_argument("--seed", type=int, default=0, help="seeds the replay's draws (0)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--embeddings",
        default=str(_default_store()),
        help="directory the embeddings are kept in between runs ('none': not kept; "
        "default: $XDG_CACHE_HOME/llmcache/replay-embeddings)",
    )
    parser.add_argument(
        "--embedder",
        choices=("minilm", "hash"),
        default="minilm",
        help="minilm: the default embedder; hash: a test double, not a semantic model, for "
        "trying the commands quickly (its figures mean nothing)",
    )


def replay_main(argv: list[str]) -> int:
    """Run ``replay`` with ``argv`` (without the ``replay`` word); return the exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m llmcache replay",
        description="Replay recorded calls through a cache configuration, the recording "
        "answering as the model; print calls, served, cost cut, acceptable answers, the "
        "model's own agreement and the excess of wrong hits with its 95%% interval.",
    )
    _common(parser)
    parser.add_argument("--config", type=Path, help="a CacheConfig file (default: the defaults)")
    parser.add_argument(
        "--cache",
        type=Path,
        help="replay into this cache directory (created if absent, kept): it starts from the "
        "answers and evidence of what was replayed or run in it before, and keeps this "
        "replay's for the next (default: a fresh temporary cache)",
    )
    parser.add_argument(
        "--learn-templates",
        action="store_true",
        help="send the calls without their cache options, as agent code that declares nothing "
        "would (no category, agent or keywords), the cache filing them under templates it "
        "learns from the traffic (what `proxy --learn-templates` does); the report's "
        "categories stay the recorded ones, to compare with a replay without it",
    )
    args = parser.parse_args(argv)
    try:
        read = _read(args.recording, args.format, strict=not args.skip_malformed)
        embedder = _embedder(args)
        modes = [EmbedMode.KEYWORD, EmbedMode.FULL]
        with _bar("embedding texts", args) as bar:
            warm(embedder, read.calls, modes, progress=bar)
        embedder.save()
        # One replay, reported whole: a bar that says it runs and, at the end, how long it took.
        with _bar(f"replaying {len(read.calls)} calls", args) as bar:
            bar(0, 1)
            report = replay(
                read,
                args.config,
                embedder=embedder,
                seed=args.seed,
                cache_dir=args.cache,
                learn_templates=args.learn_templates,
            )
            bar(1, 1)
        embedder.save()
    except (LLMCacheError, OSError) as exc:
        sys.stderr.write(f"llmcache replay: {exc}{_remedy(exc)}\n")
        return 1
    if args.json:
        listed = [hit.model_dump() for hit in report.wrong_hits]
        sys.stdout.write(json.dumps({**report.summary(), "wrong_hit_list": listed}) + "\n")
    else:
        sys.stdout.write(report.render() + "\n")
    return 0


def _thresholds(text: str) -> list[float]:
    """``0.80:0.99:0.01`` (from, to, step) or ``0.85,0.9,0.95``."""
    try:
        if ":" in text:
            low, high, step = (float(part) for part in text.split(":"))
            count = round((high - low) / step) + 1
            return [round(low + step * i, 6) for i in range(count)]
        return [float(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"thresholds are FROM:TO:STEP or a list, not {text!r}"
        ) from None


def _counts(text: str) -> list[int]:
    """``0,2``: whole numbers of words."""
    try:
        return [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"a list of word counts, not {text!r}") from None


def tune_main(argv: list[str]) -> int:
    """Run ``tune`` with ``argv`` (without the ``tune`` word); return the exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m llmcache tune",
        description="Choose each category's embed mode and threshold from a recording: the "
        "largest cost cut whose expected excess of wrong hits (answers to the very same prompt "
        "at 0) has a one-sided 95%% bound <= DELTA on the check part; write a configuration "
        "file with the figures it was chosen on.",
    )
    _common(parser)
    parser.add_argument("--delta", type=float, default=0.05, help="the bound (0.05: 5 points)")
    parser.add_argument("--out", type=Path, required=True, help="the configuration to write")
    parser.add_argument("--split", choices=("time", "agents"), default="time")
    parser.add_argument("--check-fraction", type=float, default=0.5)
    parser.add_argument(
        "--thresholds", type=_thresholds, default=list(DEFAULT_THRESHOLDS), help="0.80:0.99:0.01"
    )
    parser.add_argument(
        "--embeds", default="keyword,full", help="embed modes to try (keyword,full)"
    )
    parser.add_argument(
        "--lead-words",
        type=_counts,
        default=list(DEFAULT_LEAD_WORDS),
        help="leading words that must match, tried in keyword mode (0,2; 0: none)",
    )
    parser.add_argument("--config", type=Path, help="a base configuration whose rest is kept")
    parser.add_argument(
        "--learn-templates",
        action="store_true",
        help="tune the calls as code that declares nothing sends them: the categories are "
        "the templates the cache learns from them, their slots the keyword slots tried "
        "(run the cache with the file written and learn_templates on)",
    )
    args = parser.parse_args(argv)
    try:
        modes = [EmbedMode(m.strip()) for m in args.embeds.split(",") if m.strip()]
    except ValueError:
        parser.error(f"--embeds takes keyword and/or full, not {args.embeds!r}")
    try:
        read = _read(args.recording, args.format, strict=not args.skip_malformed)
        embedder = _embedder(args)
        with _bar("embedding texts", args) as bar:
            warm(embedder, read.calls, modes, progress=bar)
        embedder.save()
        with _bar("replaying settings", args) as bar:
            result = tune(
                read,
                delta=args.delta,
                split=args.split,
                check_fraction=args.check_fraction,
                thresholds=args.thresholds,
                embeds=modes,
                lead_words=args.lead_words,
                base=args.config,
                embedder=embedder,
                seed=args.seed,
                progress=bar,
                learn_templates=args.learn_templates,
            )
        embedder.save()
        tuning = {**result.tuning(), "recording": args.recording.name}
        result.config.to_file(args.out, tuning=tuning)
    except (LLMCacheError, OSError, ValueError) as exc:
        sys.stderr.write(f"llmcache tune: {exc}{_remedy(exc)}\n")
        return 1
    if args.json:
        sys.stdout.write(json.dumps(result.tuning()) + "\n")
    else:
        sys.stdout.write(result.render() + f"\n\nwritten: {args.out}\n")
    return 0
