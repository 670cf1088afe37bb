"""The :class:`~danlu.client.rest.Client`'s calls of jobs and sweeps (:class:`JobCalls`):
submitting, listing (:meth:`JobCalls.iter_jobs` pages through every job), reading, changing
and cancelling them, over the ``request`` the client defines (its retries, followers and
waits stay in :mod:`danlu.client.rest`)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from danlu.client.account_calls import AccountCalls
from danlu.client.bodies import clean, listed, mapping_body, seg, spec_body
from danlu.client.discovery import API_PREFIX
from danlu.client.errors import InvalidRequestError, JobDict, ServerError, parameter_not_taken
from danlu.client.replies import header_count, malformed, records, shaped
from danlu.core.paging import StalledListError, read_pages
from danlu.core.spec import JobSpec
from danlu.core.values import check_positive_int

MAX_PAGE = 1000
"""The most jobs one ``GET /jobs`` page asks for (the server's limit)."""

COUNT_HEADER = "X-Danlu-Count"
"""The header of a ``GET /jobs`` with ``count=true``: how many jobs its filters match."""


def _list_params(
    state: str | Sequence[str] | None,
    project: str | None,
    user: str | None,
    limit: int | None,
    offset: int | None,
    since: float | None,
    name: str | None,
    before_id: str | None,
    order: str | None,
) -> dict[str, Any]:
    """The query parameters of a ``GET /jobs`` that are set."""
    return clean(
        {
            "state": listed(state, "state"),
            "project": project,
            "user": user,
            "limit": limit,
            "offset": offset,
            "since": since,
            "name": name,
            "before_id": before_id,
            "order": order,
        }
    )


class JobCalls(AccountCalls):
    """The requests of jobs and sweeps: each sends one request (:meth:`iter_jobs` one a
    page) and reads its reply."""

    _offset_paging: bool = False
    """Whether the server took no ``before_id`` once: :meth:`iter_jobs` then pages by
    ``offset`` without asking again."""

    def submit(self, spec: JobSpec | Mapping[str, Any]) -> JobDict:
        """``POST /jobs``: submit a spec; returns the new Job with its submission's
        ``notes`` (a list of text: how ``gpu_memory: auto`` was resolved, or why it could
        not be and the job gets whole GPUs; the model family inferred). A server older than
        that field sends none; its job's ``pending_reason`` holds them."""
        return self._made("POST", "/jobs", json=spec_body(spec))

    def _made(self, method: str, path: str, **kwargs: Any) -> JobDict:
        """The reply to a request that makes a job or a sweep: a JSON object with the text
        ``id`` of what was made; without one (a proxy's or another server's JSON) a
        :class:`ServerError` saying that the request may have been carried out. The id was
        taken as it was: ``danlu submit --wait`` and ``danlu run`` ended in a KeyError."""
        response = self.request(method, path, **kwargs)
        made = dict(shaped(response, dict))
        if not isinstance(made.get("id"), str) or not made["id"]:
            raise malformed(response, "the reply has no text 'id' of what was made")
        return made

    def list_jobs(
        self,
        state: str | Sequence[str] | None = None,
        *,
        project: str | None = None,
        user: str | None = None,
        limit: int | None = None,
        offset: int | None = None,
        since: float | None = None,
        name: str | None = None,
        before_id: str | None = None,
        order: str | None = None,
    ) -> list[JobDict]:
        """``GET /jobs``: newest first; ``state`` may be one state or several; ``since``:
        submitted then or later; ``name``: a pattern (``train-*``); ``before_id``: only the
        jobs submitted before that one (the full id of the last job of the page before);
        ``order`` ``queue``: the jobs nearest to a start first (highest priority, then
        oldest), paged by ``offset`` (a server older than it: a 422 naming ``order``)."""
        params = _list_params(state, project, user, limit, offset, since, name, before_id, order)
        return self._records("GET", "/jobs", params=params)

    def list_jobs_counted(
        self,
        state: str | Sequence[str] | None = None,
        *,
        project: str | None = None,
        user: str | None = None,
        limit: int | None = None,
        offset: int | None = None,
        since: float | None = None,
        name: str | None = None,
        order: str | None = None,
    ) -> tuple[list[JobDict], int | None]:
        """``GET /jobs`` with ``count=true``: a page of jobs as :meth:`list_jobs` reads it and
        how many jobs match the filters on every page together (the ``X-Danlu-Count``
        header, never below the page's length), None where the reply has no such count (a
        server older than it: one that also checks its query parameters answers a 422
        naming ``count`` instead)."""
        params = _list_params(state, project, user, limit, offset, since, name, None, order)
        response = self.request("GET", "/jobs", params={**params, "count": "true"})
        page = records(response)
        total = header_count(response, COUNT_HEADER)
        return page, None if total is None else max(total, len(page))

    def count_jobs(
        self,
        state: str | Sequence[str] | None = None,
        *,
        project: str | None = None,
        user: str | None = None,
        since: float | None = None,
        name: str | None = None,
    ) -> int | None:
        """How many jobs match the filters (as :meth:`list_jobs` takes them), read from a
        ``GET /jobs`` of one job with ``count=true`` (:meth:`list_jobs_counted`); None where
        the reply has no count (a server older than it: one that also checks its query
        parameters answers a 422 naming ``count`` instead)."""
        filters: dict[str, Any] = {"project": project, "user": user, "since": since, "name": name}
        _, total = self.list_jobs_counted(state, limit=1, **filters)
        return total

    def iter_jobs(
        self,
        state: str | Sequence[str] | None = None,
        *,
        project: str | None = None,
        user: str | None = None,
        page: int = MAX_PAGE,
        since: float | None = None,
        name: str | None = None,
    ) -> Iterator[JobDict]:
        """Every matching job, newest first, each once, fetched ``page`` at a time: every job
        that matches from the first page to the last is yielded, also when jobs leave the
        ``state`` filter or are submitted meanwhile. Each page after the first asks for the
        jobs submitted before the last one read (``before_id``), which no job submitted or
        leaving the filter meanwhile shifts. A server that does not take ``before_id`` (one
        of an older version: a 422 naming it as an unknown query parameter, or a page that
        brings a job already read: the parameter ignored) is read by ``offset`` instead, each
        page overlapping the one before (:func:`~danlu.core.paging.read_pages`), from the
        last job already read on (the pages read before are not asked for again, nor their
        jobs yielded again); this client then pages so from then on. A server that
        ignores ``offset`` too (each page the first again: the reading never ended) is a
        :class:`ServerError` saying so, once the jobs of its first page are yielded."""
        check_positive_int("page", page)  # before a request (read_pages checks it lazily)
        filters: dict[str, Any] = {"project": project, "user": user, "since": since, "name": name}
        seen: set[str] = set()  # the ids yielded
        read: list[JobDict] = []  # the jobs yielded, in order: the list's first places
        if not self._offset_paging:
            limit = min(page, MAX_PAGE)
            cursor: str | None = None  # the last job read: the next page is of those before
            while True:
                try:
                    batch = self.list_jobs(
                        state, limit=limit, offset=0, before_id=cursor, **filters
                    )
                except InvalidRequestError as exc:
                    if cursor is None or not parameter_not_taken(exc, "before_id"):
                        raise
                    break  # a server of an older version: by offset from here
                ids = [str(job.get("id")) for job in batch]
                if cursor is not None and not seen.isdisjoint(ids):
                    break  # before_id ignored (a server that refuses no query): by offset
                for job, one in zip(batch, ids, strict=True):
                    seen.add(one)
                    read.append(job)
                    yield job
                if len(batch) < limit:
                    return
                cursor = ids[-1]
            self._offset_paging = True
        for job in self._jobs_by_offset(state, page, filters, read):
            one = str(job.get("id"))
            if one not in seen:
                seen.add(one)
                yield job

    def _jobs_by_offset(
        self,
        state: str | Sequence[str] | None,
        page: int,
        filters: dict[str, Any],
        read: Sequence[JobDict] = (),
    ) -> Iterator[JobDict]:
        """:meth:`iter_jobs` by ``offset``, for a server that takes no ``before_id``: each
        page overlaps the one before (:func:`~danlu.core.paging.read_pages`). ``read``: the
        jobs already read from the list's head, in order (by ``before_id`` until the server
        turned out not to take it): the pages that lie within them are answered from them,
        not asked for again, so the first request is the one that overlaps their last job
        (a job that left the list meanwhile sends it further back, as any page)."""
        replay: Sequence[JobDict] | None = read  # None from the first request on

        def fetch(offset: int, limit: int) -> list[JobDict]:
            nonlocal replay
            if replay is not None and offset + limit <= len(replay):
                return list(replay[offset : offset + limit])
            replay = None  # the server answers every page from here (the head check too)
            return self.list_jobs(state, limit=limit, offset=offset, **filters)

        try:
            yield from read_pages(fetch, lambda job: str(job.get("id")), page, MAX_PAGE)
        except StalledListError as exc:
            path = API_PREFIX + "/jobs"
            raise ServerError(
                200,
                "http",
                None,
                f"GET {path}: the server answered the same {exc.limit} jobs at offset "
                f"{exc.offset} as at offset 0: it (or a proxy in front of it) ignores "
                "'offset', so the jobs past its first page cannot be listed; check that the "
                "URL names a danlu server of this version",
                "GET",
                path,
            ) from None

    def get_job(self, job: str) -> JobDict:
        """``GET /jobs/{id}`` (an id or a unique prefix)."""
        return self._object("GET", f"/jobs/{seg(job, 'job')}")

    def update_job(
        self,
        job: str,
        *,
        priority: int | None = None,
        held: bool | None = None,
        time_limit: float | str | None = None,
        deadline: float | str | None = None,
        max_restarts: int | None = None,
        resources: Mapping[str, Any] | None = None,
    ) -> JobDict:
        """``PATCH /jobs/{id}``: change an unfinished job's priority, time limit or deadline
        (seconds, or a duration such as ``2h``: the spec's), and a queued one's
        ``max_restarts`` and ``resources`` (fields of the spec's, merged into the job's:
        ``{"gpus": 2}``); hold a job or release it. Returns the Job with the change's
        ``notes`` (a server older than them sends none)."""
        body = clean(
            {
                "priority": priority,
                "held": held,
                "time_limit": time_limit,
                "deadline": deadline,
                "max_restarts": max_restarts,
                "resources": None if resources is None else mapping_body(resources, "resources"),
            }
        )
        return self._object("PATCH", f"/jobs/{seg(job, 'job')}", json=body)

    def cancel(self, job: str) -> JobDict:
        """``POST /jobs/{id}/cancel``: returns the Job."""
        return self._object("POST", f"/jobs/{seg(job, 'job')}/cancel")

    def rerun(self, job: str, changes: Mapping[str, Any] | None = None) -> JobDict:
        """``POST /jobs/{id}/rerun``: submit a finished job again, with ``changes`` to its
        spec when given (fields as a spec writes them; a mapping is merged into the spec's:
        ``{"resources": {"gpus": 2}, "env": {"SEED": "2"}}``); returns the new Job with its
        submission's ``notes``, as :meth:`submit` does."""
        path = f"/jobs/{seg(job, 'job')}/rerun"
        if not changes:
            return self._made("POST", path)
        return self._made("POST", path, json=mapping_body(changes, "changes"))

    def submit_sweep(self, spec: Mapping[str, Any]) -> JobDict:
        """``POST /sweeps``: submit a sweep spec; returns the Sweep with its first trials."""
        return self._made("POST", "/sweeps", json=mapping_body(spec, "spec"))

    def sweeps(
        self, limit: int | None = None, states: str | Sequence[str] | None = None
    ) -> list[JobDict]:
        """``GET /sweeps``: the caller's sweeps (an admin's: all), newest first; with
        ``states``, only those in one of them."""
        params = clean({"limit": limit, "state": listed(states, "states")})
        return self._records("GET", "/sweeps", params=params)

    def sweep(self, sweep: str) -> JobDict:
        """``GET /sweeps/{id}``: one sweep with its trials and the best one."""
        return self._object("GET", f"/sweeps/{seg(sweep, 'sweep')}")

    def cancel_sweep(self, sweep: str) -> JobDict:
        """``POST /sweeps/{id}/cancel``: cancel a sweep and its unfinished trials."""
        return self._object("POST", f"/sweeps/{seg(sweep, 'sweep')}/cancel")

    def why(self, job: str) -> dict[str, Any]:
        """``GET /jobs/{id}/why``: ``{"id", "state", "reason"}``."""
        return self._object("GET", f"/jobs/{seg(job, 'job')}/why")
