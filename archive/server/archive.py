"""The archive process: media driver (embedded or external), Aeron client, catalog and the three agent threads."""

from __future__ import annotations

import logging
import os
import shutil
from typing import TYPE_CHECKING, Any

from aeron_archive_spark.archive.native import AeronClient, EmbeddedMediaDriver
from aeron_archive_spark.archive.server.conductor import ArchiveConductor
from aeron_archive_spark.archive.server.context import ArchiveContext
from aeron_archive_spark.archive.storage.catalog import Catalog, refuse_unwritable_catalog
from aeron_archive_spark.archive.storage.checksums import checksum_for_name
from aeron_archive_spark.archive.storage.cnc_file import driver_file_page_size
from aeron_archive_spark.archive.storage.mark_file import FILE_PAGE_SIZE_DEFAULT, ArchiveMarkFile

if TYPE_CHECKING:
    from aeron_archive_spark.archive.server.metrics import MetricsServer

log = logging.getLogger(__name__)

SPARSE_ENV = "AERON_TERM_BUFFER_SPARSE_FILE"


def archive_media_driver(aeron_dir: str | None = None, **kwargs: Any) -> EmbeddedMediaDriver:
    """The media driver an archive embeds when it is given none (what `aeron-archive serve` runs by default).

    Its log buffers are non-sparse unless AERON_TERM_BUFFER_SPARSE_FILE says otherwise: the default of Java's media
    driver, which Java's ArchivingMediaDriver runs (the C driver's own default is sparse). The driver then allocates
    a publication's or an image's pages when it is added, so a publisher streaming into the archive's driver does not
    touch each new page for the first time while it offers (recording a 256 MiB stream from another process went
    16-27 % faster), and a memory filesystem that is full fails the add with an error instead of raising SIGBUS in
    whichever process first writes into a hole. The cost is Java's too: a log's pages are committed from its add.
    """
    given = os.environ.get(SPARSE_ENV)
    sparse = given is not None and given.strip().lower() in ("true", "1", "yes", "on")
    return EmbeddedMediaDriver(aeron_dir, term_buffer_sparse_file=sparse, **kwargs)


class Archive:
    """A running archive. Use `Archive.launch(ctx)`; `close()` stops recordings and syncs the catalog."""

    def __init__(self, ctx: ArchiveContext) -> None:
        self.ctx = ctx.conclude()
        self.driver: EmbeddedMediaDriver | None = None
        self.aeron: AeronClient | None = None
        self.catalog: Catalog | None = None
        self.conductor: ArchiveConductor | None = None
        self.metrics: MetricsServer | None = None
        self.mark_file: ArchiveMarkFile | None = None
        self._closed = False

    @classmethod
    def launch(cls, ctx: ArchiveContext) -> Archive:
        archive = cls(ctx)
        try:
            archive._start()
        except BaseException:
            archive.close()
            raise
        return archive

    def _start(self) -> None:
        ctx = self.ctx
        if ctx.delete_archive_on_start and os.path.isdir(ctx.archive_dir):
            shutil.rmtree(ctx.archive_dir)
        os.makedirs(ctx.archive_dir, exist_ok=True)
        # A catalog this archive may not write (Aeron < 1.0's layout, another major version) is refused on reading its
        # header alone, before the mark file is touched: such a directory (an old archive's, whose mark file has a
        # layout of its own) is left byte for byte, for `aeron-archive migrate`.
        refuse_unwritable_catalog(ctx.archive_dir)
        # The mark file before anything else touches the directory (as Java's conclude() does): a directory another
        # archive holds is refused before its catalog is recovered or written.
        self.mark_file = self._acquire_mark_file()
        # Open (and recover) the catalog first: a torn recording must stop startup before anything listens.
        self.catalog = Catalog(
            ctx.archive_dir,
            writable=True,
            capacity=ctx.catalog_capacity,
            file_sync_level=ctx.file_sync_level,
            catalog_file_sync_level=ctx.catalog_file_sync_level,
            checksum=checksum_for_name(ctx.record_checksum) if ctx.record_checksum else None,
        )
        if ctx.aeron_dir is None:
            self.driver = archive_media_driver()
            aeron_dir = self.driver.aeron_dir
        else:
            aeron_dir = ctx.aeron_dir
        self.aeron = AeronClient(aeron_dir, client_name=ctx.client_name)
        archive_id = ctx.archive_id if ctx.archive_id is not None else self.aeron.client_id
        self.mark_file.encode(
            control_stream_id=ctx.control_stream_id,
            local_control_stream_id=ctx.local_control_stream_id,
            events_stream_id=ctx.recording_events_stream_id,
            archive_id=archive_id,
            error_buffer_length=ctx.error_buffer_length,
            control_channel=ctx.control_channel,
            local_control_channel=ctx.local_control_channel,
            events_channel=ctx.recording_events_channel if ctx.recording_events_enabled else None,
            aeron_directory=aeron_dir,
        )
        self.conductor = ArchiveConductor(ctx, self.aeron, self.catalog, archive_id, self.mark_file)
        self.mark_file.signal_ready(ctx.epoch_clock())  # Java's last step of conclude(): the version, then ready
        self.conductor.start()
        if ctx.metrics_address is not None:
            from aeron_archive_spark.archive.server.metrics import ArchiveCollector, MetricsServer  # only if asked

            collector = ArchiveCollector(
                archive_id,
                self.aeron.counters_reader,
                self.catalog,
                ctx.archive_dir,
                ctx.low_storage_space_threshold,
                retention=self.conductor.retention,
            )
            self.metrics = MetricsServer.start(ctx.metrics_address, collector)
        log.info(
            "archive %d started: dir=%s aeron=%s control=%s/%d local=%s/%d",
            archive_id,
            ctx.archive_dir,
            aeron_dir,
            ctx.control_channel,
            ctx.control_stream_id,
            ctx.local_control_channel,
            ctx.local_control_stream_id,
        )

    def _acquire_mark_file(self) -> ArchiveMarkFile:
        ctx = self.ctx
        page_size = driver_file_page_size(ctx.aeron_dir) if ctx.aeron_dir is not None else None
        return ArchiveMarkFile.acquire(
            ctx.mark_file_dir or ctx.archive_dir,
            archive_dir=ctx.archive_dir,
            error_buffer_length=ctx.error_buffer_length,
            file_page_size=page_size or FILE_PAGE_SIZE_DEFAULT,
            epoch_clock=ctx.epoch_clock,
            liveness_timeout_ms=ctx.mark_file_liveness_timeout_ms,
        )

    @property
    def aeron_dir(self) -> str:
        assert self.aeron is not None
        return self.aeron.aeron_dir

    @property
    def archive_id(self) -> int:
        assert self.conductor is not None
        return self.conductor.archive_id

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.metrics is not None:
            self.metrics.close()  # first: no scrape reads the counters or the catalog once they close
        if self.conductor is not None:
            self.conductor.close()
        if self.catalog is not None:
            self.catalog.close()
        if self.aeron is not None:
            self.aeron.close()
        if self.driver is not None:
            self.driver.close()
        if self.mark_file is not None:
            # Java's signalTerminated (timestamp -1: free at once for the next start), also after a failed start;
            # last, so the directory stays held until everything above has let go of it. The file stays.
            self.mark_file.signal_terminated()
            self.mark_file.close()
        log.info("archive closed: %s", self.ctx.archive_dir)

    def __enter__(self) -> Archive:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
