"""The archive process: media driver (embedded or external), Aeron client, catalog and the three agent threads."""

from __future__ import annotations

import logging
import os
import shutil
from typing import TYPE_CHECKING, Any

from aeron_archive_spark.archive.native import AeronClient, EmbeddedMediaDriver
from aeron_archive_spark.archive.server.conductor import ArchiveConductor
from aeron_archive_spark.archive.server.context import ArchiveContext
from aeron_archive_spark.archive.storage.catalog import Catalog
from aeron_archive_spark.archive.storage.checksums import checksum_for_name

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
        self.conductor = ArchiveConductor(ctx, self.aeron, self.catalog, archive_id)
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
        log.info("archive closed: %s", self.ctx.archive_dir)

    def __enter__(self) -> Archive:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
