"""What a document is, judged from its bytes first and its name / declared type second, and the checks
that must happen before markitdown sees it (encryption, truncation, decompression bombs, metadata titles).

Everything here is blocking and runs on the converter's worker threads.
"""

from __future__ import annotations

import io
import mimetypes
import zipfile
from dataclasses import dataclass
from pathlib import PurePosixPath

import magika
import olefile
import pypdfium2
from defusedxml import ElementTree

from . import errors

PDF_MIME = "application/pdf"
ZIP_MIME = "application/zip"
OLE_MIME = "application/x-ole-storage"  # the container of legacy Office files and encrypted OOXML
OOXML_MIMES = {
    "docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "pptx": "application/vnd.openxmlformats-officedocument.presentationml.presentation",
    "xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
}
SPREADSHEET_MIMES = {OOXML_MIMES["xlsx"], "application/vnd.ms-excel", "text/csv", "text/tab-separated-values"}

# Binary formats markitdown converts (magika labels). Every text format is converted as text.
_BINARY_LABELS = {"pdf", "docx", "pptx", "xlsx", "xls", "epub", "zip", "outlook"}
# Where magika's MIME type is vaguer than the format it recognised.
_MIME_BY_LABEL = {"ipynb": "application/x-ipynb+json", "outlook": "application/vnd.ms-outlook"}
_BINARY_EXTENSIONS = {".pdf", ".docx", ".pptx", ".xlsx", ".xls", ".epub", ".zip", ".msg"}
_ZIP_FAMILY = {".zip", ".docx", ".pptx", ".xlsx", ".epub"}
_OLE_FAMILY = {".xls", ".msg"}
_PDF_MAGIC = b"%PDF-"
_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")
_OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_MAX_ARCHIVE_DEPTH = 3
# Metadata titles that tools write when the author gave none.
_PLACEHOLDER_TITLES = {"untitled", "anonymous", "(anonymous)", "unknown", "title", "(unspecified)", "unspecified"}


@dataclass(frozen=True)
class Detected:
    """The format a document was recognised as."""

    mime_type: str
    extension: str | None  # with the dot, as markitdown wants it
    is_text: bool


def _hint(filename: str, mime_type: str) -> tuple[str, str]:
    """The caller's hints: (extension with dot, MIME type without parameters), both lower case."""
    extension = PurePosixPath(filename.replace("\\", "/")).suffix.lower()
    declared = mime_type.split(";", 1)[0].strip().lower()
    if not declared and extension:
        declared = (mimetypes.guess_type("x" + extension, strict=False)[0] or "").lower()
    return extension, declared


def detect(identifier: magika.Magika, data: bytes, filename: str = "", mime_type: str = "") -> Detected:
    """Recognise the format from the content (magika), using the name and declared type only as hints.

    Binary content that is not a supported document format is refused here, whatever its name says, so
    binary junk never comes back as "Markdown".
    """
    extension, declared = _hint(filename, mime_type)
    output = identifier.identify_bytes(data).prediction.output
    if output.is_text:
        # magika says plain text for Markdown, e-mail and the like; a declared text type is more precise.
        detected = output.mime_type
        if detected == "text/plain" and declared.startswith("text/"):
            detected = declared
        # Keep a text extension the caller gave (.tsv, .md, .eml say more than magika's guess), not a
        # binary one: a .pdf that is really HTML is converted as HTML.
        ext = extension if extension and extension not in _BINARY_EXTENSIONS else _first_ext(output.extensions)
        return Detected(_MIME_BY_LABEL.get(output.label, detected), ext, True)
    if output.label in _BINARY_LABELS:
        if output.label == "zip" and extension in _ZIP_FAMILY:
            return Detected(declared or ZIP_MIME, extension, False)  # a container magika did not place
        ext = extension if extension.lstrip(".") in output.extensions else _first_ext(output.extensions)
        return Detected(_MIME_BY_LABEL.get(output.label, output.mime_type), ext, False)
    # magika can be unsure about damaged files; the signature plus a matching name still say what it is.
    if data.startswith(_PDF_MAGIC) or (_PDF_MAGIC in data[:1024] and extension == ".pdf"):
        return Detected(PDF_MIME, ".pdf", False)
    if data.startswith(_ZIP_MAGIC) and extension in _ZIP_FAMILY:
        return Detected(declared or ZIP_MIME, extension, False)
    if data.startswith(_OLE_MAGIC) and (extension in _OLE_FAMILY or _is_encrypted_ooxml(data)):
        return Detected(declared or OLE_MIME, extension, False)
    raise errors.unsupported_media_type(output.mime_type, detected_label=output.label)


def _first_ext(extensions: list[str]) -> str | None:
    return f".{extensions[0]}" if extensions else None


def inspect(detected: Detected, data: bytes, max_unpacked_bytes: int) -> str:
    """Refuse encrypted, truncated or bomb-like containers before conversion; return a metadata title."""
    if data.startswith(_OLE_MAGIC):
        if _is_encrypted_ooxml(data):
            raise errors.encrypted(OLE_MIME, what="Office (DOCX, XLSX or PPTX)")
        return ""
    if detected.mime_type == PDF_MIME:
        return _inspect_pdf(data)
    if data.startswith(_ZIP_MAGIC):
        try:
            archive = zipfile.ZipFile(io.BytesIO(data))
        except zipfile.BadZipFile as exc:
            raise errors.conversion_failed(detected.mime_type, str(exc)) from None
        with archive:
            _check_archive(archive, detected.mime_type, max_unpacked_bytes, max_unpacked_bytes, depth=1)
            return _ooxml_title(archive)
    return ""


def _is_encrypted_ooxml(data: bytes) -> bool:
    """Password-protected DOCX/XLSX/PPTX are OLE files holding an EncryptedPackage stream (MS-OFFCRYPTO)."""
    try:
        with olefile.OleFileIO(io.BytesIO(data)) as ole:
            return ole.exists("EncryptedPackage")
    except OSError:
        return False


def _inspect_pdf(data: bytes) -> str:
    if b"%%EOF" not in data[-2048:]:
        raise errors.conversion_failed(PDF_MIME, "the file is truncated: no %%EOF marker at its end")
    try:
        pdf = pypdfium2.PdfDocument(data)
    except pypdfium2.PdfiumError as exc:
        if getattr(exc, "err_code", None) == pypdfium2.raw.FPDF_ERR_PASSWORD:
            raise errors.encrypted(PDF_MIME) from None
        raise errors.conversion_failed(PDF_MIME, str(exc)) from None
    try:
        return clean_title(pdf.get_metadata_value("Title"))
    finally:
        pdf.close()


def _check_archive(archive: zipfile.ZipFile, mime_type: str, budget: int, limit: int, depth: int) -> int:
    """Refuse encrypted members and archives that unpack (nested archives included) past `limit` bytes.

    Returns the budget left. zipfile never returns more than a member's declared size, so the declared
    sizes bound what conversion can unpack.
    """
    members = archive.infolist()
    if any(member.flag_bits & 0x1 for member in members):
        raise errors.encrypted(mime_type)
    budget -= sum(member.file_size for member in members)
    if budget < 0:
        raise errors.payload_too_large(limit - budget, limit, what="the unpacked archive")
    for member in members:
        with archive.open(member) as handle:
            if handle.read(4) not in _ZIP_MAGIC:
                continue
        if depth >= _MAX_ARCHIVE_DEPTH:
            raise errors.conversion_failed(mime_type, f"archives nested more than {_MAX_ARCHIVE_DEPTH} deep")
        try:
            inner = zipfile.ZipFile(io.BytesIO(archive.read(member)))
        except zipfile.BadZipFile:
            continue  # a damaged member fails (or is skipped) in conversion, like any other
        with inner:
            budget = _check_archive(inner, mime_type, budget, limit, depth + 1)
    return budget


def _ooxml_title(archive: zipfile.ZipFile) -> str:
    """dc:title from docProps/core.xml (DOCX, PPTX, XLSX), if the author set one."""
    try:
        core = ElementTree.fromstring(archive.read("docProps/core.xml"))
    except (KeyError, ValueError, ElementTree.ParseError):  # no metadata, or unsafe / broken XML
        return ""
    title = core.find("{http://purl.org/dc/elements/1.1/}title")
    return clean_title(title.text if title is not None else "")


def clean_title(title: str | None) -> str:
    """A title worth showing: whitespace collapsed, placeholders dropped, at most 300 characters."""
    title = " ".join((title or "").split())
    return "" if title.lower() in _PLACEHOLDER_TITLES else title[:300]
