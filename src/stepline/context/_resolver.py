"""The resolver: one step's TELIS context from shards and a language server, within its budget.

One resolver serves one run. It keeps

* the project's corpus (the shards file and the markdown docs of ``telis.docs``) in an FTS5 index, reused
  for ``cache_ttl_seconds`` without looking at the disk, then re-checked by each file's version (inode, size,
  mtime) and rebuilt only when one changed; a file's shards are kept by its version, so a rebuild re-reads
  only what changed;
* the documents a step names (``telis_documents``), indexed on their own and ranked before the corpus;
* the run's language servers (:class:`LspPool`) and their answers, reused for the TTL;
* the sha256 every source had when it was last used, in this run and the runs before it (a small JSON file
  beside the runs), so a source that changed is reported as drift.

The context it returns is plain JSON (what the journal records and executors get); see :meth:`resolve`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from collections import ChainMap
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stepline._paths import inside
from stepline.context._cache import TtlCache
from stepline.context._config import TelisConfig, TelisRequest
from stepline.context._fingerprint import fingerprint
from stepline.context._index import ShardIndex
from stepline.context._lsp import SUFFIXES, LspPool, position_outside
from stepline.context._select import select_within_budget
from stepline.context._shards import Shard, load_shards_file, shards_from_markdown, shards_from_text_file
from stepline.context._tokens import clip_to_tokens, estimate_tokens
from stepline.formats import FileVersion, read_file

__all__ = ["ContextResolver"]

_MARKDOWN = frozenset({".md", ".markdown", ".mdx"})
_SKIP_DIRS = frozenset({".git", ".stepline", ".venv", "venv", "node_modules", "__pycache__", ".mypy_cache",
                        ".ruff_cache", ".pytest_cache"})
_MAX_STEP_FILES = 200
_MAX_FILE_BYTES = 2 << 20
#: The sources' digests are written at most this often during a run (and always at its end): a file write per
#: step would cost a long run more than its retrieval.
_SAVE_EVERY_SECONDS = 2.0
_INLINE_SUFFIX = {"python": ".py", "typescript": ".ts", "javascript": ".js", "json": ".json", "yaml": ".yaml"}


@dataclass(slots=True)
class _FileShards:
    version: FileVersion
    sha256: str
    shards: list[Shard]


@dataclass(slots=True)
class _Corpus:
    index: ShardIndex
    versions: dict[str, FileVersion]  # absolute path -> version, every file the corpus was built from
    sources: dict[str, str]  # project-relative source -> sha256 of what was indexed
    checked_at: float


class ContextResolver:
    """Resolves steps' contexts for one run; :meth:`aclose` shuts its language servers down.

    Args:
        project_root: the folder paths are relative to (and documents are confined to).
        config: the ``telis`` section of the runtime config.
        state_path: where the sources' last digests are kept between runs (None: only within this run).
        clock: the monotonic clock the TTL is measured with.
    """

    def __init__(self, project_root: Path, config: TelisConfig, *, state_path: Path | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.root = project_root.resolve()
        self._root_prefix = str(self.root).rstrip("/") + "/"
        self.config = config
        self.state_path = state_path
        self._clock = clock
        self._files: dict[str, _FileShards] = {}
        self._corpus: _Corpus | None = None
        self._step_indexes: TtlCache[tuple[ShardIndex, dict[str, str]]] = TtlCache(config.cache_ttl_seconds,
                                                                                    clock=clock, max_entries=64)
        self._answers: TtlCache[dict[str, Any]] = TtlCache(config.cache_ttl_seconds, clock=clock)
        self.lsp = LspPool(self.root, config.servers, timeout=config.lsp_timeout_seconds)
        self._known: dict[str, dict[str, Any]] | None = None
        self._known_dirty = False
        self._known_saved_at = -_SAVE_EVERY_SECONDS

    # -- resolving ---------------------------------------------------------------------------------------------
    async def resolve(self, request: TelisRequest) -> dict[str, Any]:
        """The context for ``request``: plain JSON with its ``fingerprint``.

        Fields: ``request`` (what was asked), ``shards`` (id, title, source, score, tier, tokens, text; best
        first), ``retrieved`` (shards found before the budget), ``phase`` and ``stopped`` (how far escalation
        went and why it ended), ``lsp`` (the server's answer, or None), ``tokens`` (the estimate of it all),
        ``warnings`` and ``sources`` (each source's sha256 when it was used).
        """
        warnings: list[str] = []
        sources: dict[str, str] = {}
        lsp_part: dict[str, Any] | None = None
        lsp_tokens = 0
        if request.wants_lsp:
            lsp_part = await self._ask_server(request, warnings, sources)
            if lsp_part is not None and lsp_part.get("result") is not None:
                lsp_part["result"], lsp_tokens = _clip_answer(lsp_part["result"], request.budget_tokens)
        elif request.document_path is not None or request.document_text is not None:
            warnings.append("telis_line is not set: no language server was asked")
        hits: list[tuple[Shard, float]] = []
        shard_sources: Mapping[str, str] = {}
        if request.query and request.shard_limit > 0:
            hits, shard_sources = self._retrieve(request, warnings)
        selection = select_within_budget(hits, request.phase_tiers, request.max_phase,
                                         max(0, request.budget_tokens - lsp_tokens))
        shards = []
        for item in selection.chosen:
            shards.append({"id": item.shard.id, "title": item.shard.title, "source": item.shard.source,
                           "score": item.score, "tier": item.tier, "tokens": item.tokens,
                           "text": item.shard.text(item.tier)})
            if item.shard.source in shard_sources:
                sources[item.shard.source] = shard_sources[item.shard.source]
        if selection.left_out:
            warnings.append(f"{selection.left_out} retrieved shard(s) left out: the budget of "
                            f"{request.budget_tokens} tokens was spent")
        context: dict[str, Any] = {
            "request": request.describe(), "shards": shards, "retrieved": len(hits), "phase": selection.phase,
            "stopped": selection.stopped, "lsp": lsp_part, "tokens": selection.tokens + lsp_tokens,
            "warnings": warnings, "sources": dict(sorted(sources.items()))}
        context["fingerprint"] = fingerprint(context)
        return context

    def _retrieve(self, request: TelisRequest, warnings: list[str]) -> tuple[list[tuple[Shard, float]],
                                                                              Mapping[str, str]]:
        """The step's documents' best shards, then the corpus's, up to the limit; and every source's sha256."""
        assert request.query is not None
        hits: list[tuple[Shard, float]] = []
        step_sources: dict[str, str] = {}
        if request.documents:
            index, step_sources = self._step_index(request.documents, warnings)
            hits = index.search(request.query, limit=request.shard_limit, min_score=request.min_score)
        corpus = self._base_corpus(warnings)
        seen = {shard.id for shard, _ in hits}
        if len(hits) < request.shard_limit:
            more = corpus.index.search(request.query, limit=request.shard_limit, min_score=request.min_score)
            hits += [(shard, score) for shard, score in more if shard.id not in seen][: request.shard_limit - len(hits)]
        sources = ChainMap(step_sources, corpus.sources)
        if not len(corpus.index) and not request.documents:
            warnings.append("no shards to search: no shards file and no document matches telis.docs "
                            f"({', '.join(self.config.docs) or 'none'})")
        return hits, sources

    # -- the corpus ---------------------------------------------------------------------------------------------
    def _base_corpus(self, warnings: list[str]) -> _Corpus:
        now = self._clock()
        corpus = self._corpus
        if corpus is not None and now - corpus.checked_at < self.config.cache_ttl_seconds:
            return corpus
        files = self._corpus_files()
        versions = {str(path): version for path in files if (version := _version(path)) is not None}
        if corpus is not None:
            # The files the shards file pointed to are not found by globbing: they are checked as well.
            also = {p: v for p in corpus.versions if p not in versions and (v := _version(Path(p))) is not None}
            if {**versions, **also} == corpus.versions:
                corpus.checked_at = now
                return corpus
        shards: list[Shard] = []
        sources: dict[str, str] = {}
        shards_file = self._shards_file()
        for path in files:
            if shards_file is not None and path == shards_file:
                shards += self._shards_file_shards(path, sources, versions)
            else:
                entry = self._file_shards(path, warnings)
                if entry is not None:
                    shards += entry.shards
                    sources[self._rel(path)] = entry.sha256
        if self._corpus is not None:
            self._corpus.index.close()
        self._corpus = _Corpus(ShardIndex(shards), versions, sources, now)
        return self._corpus

    def _corpus_files(self) -> list[Path]:
        """The shards file (first) and the markdown docs, each once, in a stable order."""
        found: list[Path] = []
        shards_file = self._shards_file()
        if shards_file is not None:
            found.append(shards_file)
        seen = set(found)
        for pattern in self.config.docs:
            for path in sorted(self.root.glob(pattern)):
                if path in seen or not path.is_file() or _skipped(path.relative_to(self.root)):
                    continue
                seen.add(path)
                found.append(path)
        return found

    def _shards_file(self) -> Path | None:
        if self.config.shards_file:
            return (self.root / self.config.shards_file).resolve()  # missing: a ConfigError when it is read
        default = self.root / "config" / "shards.yaml"
        return default if default.is_file() else None

    def _shards_file_shards(self, path: Path, sources: dict[str, str],
                            versions: dict[str, FileVersion]) -> list[Shard]:
        from stepline.errors import ConfigError

        if not path.is_file():
            raise ConfigError("shards file not found", path=str(path),
                              hint="fix telis.shards_file in config/runtime.yaml (relative to the project root)")
        shards, read = load_shards_file(path, self.root, full_tokens=self.config.full_tokens)
        for source in read:
            data, versions[str(source)] = read_file(source)  # a shard's own file changing rebuilds the corpus too
            sources[self._rel(source)] = hashlib.sha256(data).hexdigest()
        return shards

    def _file_shards(self, path: Path, warnings: list[str]) -> _FileShards | None:
        """A file's shards, re-made only when its version changed; None for a binary or too large file."""
        try:
            data, version = read_file(path)
        except OSError as exc:
            warnings.append(f"{self._rel(path)} cannot be read: {exc.strerror or exc}")
            return None
        key = str(path)
        known = self._files.get(key)
        if known is not None and known.version == version:
            return known
        if len(data) > _MAX_FILE_BYTES or b"\0" in data[:8192]:
            return None
        text = data.decode("utf-8", "replace")
        rel = self._rel(path)
        if path.suffix.lower() in _MARKDOWN:
            shards = shards_from_markdown(text, rel, split_level=self.config.split_level,
                                          full_tokens=self.config.full_tokens)
        else:
            shards = shards_from_text_file(text, rel, full_tokens=self.config.full_tokens)
        entry = _FileShards(version, hashlib.sha256(data).hexdigest(), shards)
        self._files[key] = entry
        return entry

    def _step_index(self, documents: list[str], warnings: list[str]) -> tuple[ShardIndex, dict[str, str]]:
        """An index of the files ``documents`` name (paths, folders, globs), reused while none changed."""
        files = self._expand(documents, warnings)
        entries = [(path, self._file_shards(path, warnings)) for path in files]
        key = "|".join(f"{path}:{entry.sha256}" for path, entry in entries if entry is not None)
        cached = self._step_indexes.get(key)
        if cached is not None:
            return cached
        shards = [shard for _, entry in entries if entry is not None for shard in entry.shards]
        built = (ShardIndex(shards), {self._rel(path): entry.sha256 for path, entry in entries if entry is not None})
        self._step_indexes.put(key, built)
        return built

    def _expand(self, documents: list[str], warnings: list[str]) -> list[Path]:
        """The files ``documents`` name: project paths, folders (walked) or globs, absolute or relative to the
        root. A workflow's inputs list alternatives (BMAD's whole or sharded document), so a name that matches
        nothing is no warning unless none matches; a text that is no path (``FULL_LOAD``) is passed over."""
        found: dict[Path, None] = {}
        for document in documents:
            pattern = document
            if Path(document).is_absolute():
                try:
                    pattern = Path(document).relative_to(self.root).as_posix()
                except ValueError:
                    warnings.append(f"document {document!r} is outside the project; left out")
                    continue
            if any(ch in pattern for ch in "*?["):
                matches = sorted(self.root.glob(pattern))
            elif "/" in pattern or "." in pattern or (self.root / pattern).exists():
                matches = [self.root / pattern]
            else:
                continue
            for match in matches:
                target = inside(self.root, match)
                if target is None:
                    warnings.append(f"document {document!r} is outside the project; left out")
                elif target.is_dir():
                    for path in sorted(target.rglob("*")):
                        if path.is_file() and not _skipped(path.relative_to(self.root)):
                            found.setdefault(path, None)
                elif target.is_file():
                    found.setdefault(target, None)
        if not found:
            warnings.append("none of the step's documents exists: " + ", ".join(documents[:5])
                            + (", …" if len(documents) > 5 else ""))
        if len(found) > _MAX_STEP_FILES:
            warnings.append(f"the step's documents name {len(found)} files; the first {_MAX_STEP_FILES} are searched")
        return list(found)[:_MAX_STEP_FILES]

    # -- the language server ------------------------------------------------------------------------------------
    async def _ask_server(self, request: TelisRequest, warnings: list[str],
                          sources: dict[str, str]) -> dict[str, Any] | None:
        assert request.line is not None
        if request.document_path is not None:
            target = inside(self.root, request.document_path)
            if target is None:
                warnings.append(f"telis_document_path {request.document_path!r} is outside the project; "
                                "no language server was asked")
                return None
            document = self._rel(target)
            try:
                text = target.read_bytes().decode("utf-8", "replace")
            except OSError:
                warnings.append(f"telis_document_path {request.document_path!r} not found; "
                                "no language server was asked")
                return None
            language = request.language or SUFFIXES.get(target.suffix.lower())
            uri = target.as_uri()
            sources[document] = hashlib.sha256(text.encode("utf-8")).hexdigest()
        else:
            text = request.document_text or ""
            language = request.language
            digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
            document = f"inline:{digest[:12]}"
            # A file name in the project the server can place the text at; nothing is written there.
            uri = (self.root / ".stepline" / "telis" / f"inline-{digest[:16]}"
                   f"{_INLINE_SUFFIX.get(language or '', '.txt')}").as_uri()
        part: dict[str, Any] = {"method": request.method, "language": language, "document": document,
                                "line": request.line, "character": request.character, "server": None,
                                "result": None}
        if language is None:
            warnings.append(f"the language of {document} is unknown: set telis_language; no language server "
                            "was asked")
            return part
        outside = position_outside(text, request.line, request.character or 0)
        if outside is not None:
            warnings.append(f"{document}: telis_line/telis_character: {outside}; no language server was asked")
            return part
        key = "|".join([language, request.method, uri, hashlib.sha256(text.encode()).hexdigest(),
                        str(request.line), str(request.character)])
        answer = self._answers.get(key)
        if answer is None:
            got = await self.lsp.ask(language, uri, text, request.line, request.character or 0, request.method)
            answer = {"server": got.server, "result": got.result, "warning": got.warning}
            if got.result is not None:
                self._answers.put(key, answer)
        part["server"], part["result"] = answer["server"], answer["result"]
        if answer["warning"]:
            warnings.append(str(answer["warning"]))
        return part

    # -- drift ---------------------------------------------------------------------------------------------------
    def changed_sources(self, context: dict[str, Any]) -> list[dict[str, Any]]:
        """The sources of a recorded ``context`` whose files differ now (``now`` is None for a deleted file)."""
        changed = []
        for source, digest in (context.get("sources") or {}).items():
            now = self._digest_now(source)
            if now != digest:
                changed.append({"source": source, "was": digest, "now": now})
        return changed

    def note_sources(self, context: dict[str, Any], *, run_id: str, step_id: str) -> list[dict[str, Any]]:
        """Remember the digests ``context`` used; return the sources whose digest differs from when they were
        last used (by an earlier step or an earlier run), naming where that was."""
        known = self._load_known()
        changed = []
        for source, digest in (context.get("sources") or {}).items():
            before = known.get(source)
            if before is not None and before.get("sha256") != digest:
                changed.append({"source": source, "was": before.get("sha256"), "now": digest,
                                "since": f"run {before.get('run_id')} step {before.get('step_id')}"})
            if before is None or before.get("sha256") != digest:
                known[source] = {"sha256": digest, "run_id": run_id, "step_id": step_id}
                self._known_dirty = True
        if self._clock() - self._known_saved_at >= _SAVE_EVERY_SECONDS:
            self._save_known()  # during the run too: a run that is killed has still used these
        return changed

    def _digest_now(self, source: str) -> str | None:
        try:
            data = (self.root / source).read_bytes()
        except OSError:
            return None
        return hashlib.sha256(data).hexdigest()

    def _load_known(self) -> dict[str, dict[str, Any]]:
        if self._known is None:
            self._known = {}
            if self.state_path is not None:
                with contextlib.suppress(OSError, ValueError):
                    loaded = json.loads(self.state_path.read_text(encoding="utf-8"))
                    if isinstance(loaded, dict):
                        self._known = {k: v for k, v in loaded.items() if isinstance(v, dict)}
        return self._known

    def _save_known(self) -> None:
        """Write the sources' digests for the next run (atomically; advisory, so without fsync)."""
        if self.state_path is None or not self._known_dirty or self._known is None:
            return
        with contextlib.suppress(OSError):
            self.state_path.parent.mkdir(parents=True, exist_ok=True)
            temp = self.state_path.with_name(f".{self.state_path.name}.{os.getpid()}.tmp")
            temp.write_text(json.dumps(self._known, sort_keys=True), encoding="utf-8")
            os.replace(temp, self.state_path)
            self._known_dirty = False
            self._known_saved_at = self._clock()

    async def aclose(self) -> None:
        """Shut the run's language servers down and keep the sources' digests for the next run."""
        try:
            await self.lsp.aclose()
        finally:
            self._save_known()
            if self._corpus is not None:
                self._corpus.index.close()
                self._corpus = None

    def _rel(self, path: Path) -> str:
        text = str(path)
        if text.startswith(self._root_prefix) and "/../" not in text:  # found under the root: no resolving
            return text[len(self._root_prefix):]
        try:
            return path.resolve().relative_to(self.root).as_posix()
        except ValueError:
            return path.as_posix()


def _version(path: Path) -> FileVersion | None:
    try:
        info = path.stat()
    except OSError:
        return None
    return info.st_ino, info.st_size, info.st_mtime_ns


def _skipped(rel: Path) -> bool:
    return any(part in _SKIP_DIRS for part in rel.parts[:-1])


def _clip_answer(result: dict[str, Any], budget: int) -> tuple[dict[str, Any], int]:
    """A server's answer cut to the budget, and its tokens (a hover's text is what can be long)."""
    if "text" in result:
        text = clip_to_tokens(str(result["text"]), budget)
        return {**result, "text": text}, estimate_tokens(text)
    return result, estimate_tokens(json.dumps(result, ensure_ascii=False))
