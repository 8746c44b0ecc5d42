"""The archive server: `Archive.launch(ArchiveContext(...))`."""
