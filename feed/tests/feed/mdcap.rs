//! The .mdcap capture format: round trips through memory and files,
//! truncation at every byte offset, bad headers, impossible lengths, and
//! no allocation per record.

use allocation_counter::measure;
use mdbus_feed::mdcap::{
    has_magic, MdcapError, MdcapReader, MdcapWriter, Record, FILE_HEADER_LEN, MAGIC,
    MAX_MESSAGE_LEN, RECORD_HEADER_LEN, RECORD_HEADER_LEN_V1, STREAM_ALL, STREAM_NONE,
};
use mdbus_feed::synth::{Generator, SynthConfig};

use crate::common::Scratch;

/// (timestamp, sequence, message) triples of awkward sizes: empty, one
/// byte, typical ITCH, the largest allowed.
fn records() -> Vec<(u64, u64, Vec<u8>)> {
    vec![
        (1_700_000_000_123_456_789, 1, b"A-first".to_vec()),
        (1_700_000_000_123_456_790, 2, Vec::new()),
        (0, u64::MAX, vec![0xff]),
        (u64::MAX, 0, (0..50).collect()),
        (42, 7, vec![0x5a; MAX_MESSAGE_LEN]),
    ]
}

fn write_all(recs: &[(u64, u64, Vec<u8>)]) -> Vec<u8> {
    let mut w = MdcapWriter::new("mem.mdcap", Vec::new()).unwrap();
    for (t, s, m) in recs {
        w.write(*t, *s, m).unwrap();
    }
    assert_eq!(w.records_written(), recs.len() as u64);
    let expected: usize = FILE_HEADER_LEN
        + recs
            .iter()
            .map(|r| RECORD_HEADER_LEN + r.2.len())
            .sum::<usize>();
    assert_eq!(w.bytes_written(), expected as u64);
    let bytes = w.finish().unwrap();
    assert_eq!(bytes.len(), expected);
    bytes
}

fn read_all(name: &str, bytes: &[u8]) -> Result<Vec<(u64, u64, Vec<u8>)>, MdcapError> {
    let mut r = MdcapReader::new(name, bytes)?;
    let mut out = Vec::new();
    while let Some(Record {
        timestamp_ns,
        sequence,
        data,
        ..
    }) = r.next_record()?
    {
        out.push((timestamp_ns, sequence, data.to_vec()));
    }
    Ok(out)
}

#[test]
fn round_trip_in_memory() {
    let recs = records();
    let bytes = write_all(&recs);
    assert!(has_magic(&bytes));
    assert_eq!(&bytes[..8], b"MDBUSCAP");
    assert_eq!(&bytes[8..10], &[2, 0], "version 2, little-endian");
    assert_eq!(&bytes[10..12], &[0, 0], "no stream names");
    assert_eq!(&bytes[12..16], &[0; 4], "reserved bytes are zero");
    // The first record's header, field by field.
    let first = &bytes[FILE_HEADER_LEN..];
    assert_eq!(&first[..8], &1_700_000_000_123_456_789u64.to_le_bytes());
    assert_eq!(&first[8..16], &1u64.to_le_bytes());
    assert_eq!(&first[16..20], &7u32.to_le_bytes());
    assert_eq!(&first[20..22], &STREAM_NONE.to_le_bytes());
    assert_eq!(&first[22..24], &[0, 0]);
    assert_eq!(&first[24..31], b"A-first");
    assert_eq!(read_all("mem.mdcap", &bytes).unwrap(), recs);

    let mut r = MdcapReader::new("mem.mdcap", &bytes[..]).unwrap();
    assert_eq!(r.offset(), FILE_HEADER_LEN as u64);
    while r.next_record().unwrap().is_some() {}
    assert_eq!(r.records_read(), recs.len() as u64);
    assert_eq!(r.offset(), bytes.len() as u64);
    assert!(r.next_record().unwrap().is_none(), "the end stays the end");
}

#[test]
fn round_trip_through_a_file_of_a_synthetic_session() {
    let scratch = Scratch::new("mdcap-file");
    let path = scratch.path("day.mdcap");
    let day: Vec<_> = Generator::new(&SynthConfig {
        symbols: 5,
        order_messages: 2_000,
        ..SynthConfig::default()
    })
    .unwrap()
    .collect();
    let mut w = MdcapWriter::create(&path).unwrap();
    for (i, m) in day.iter().enumerate() {
        w.write(m.timestamp().nanos(), i as u64 + 1, m.bytes())
            .unwrap();
    }
    w.finish().unwrap();

    let mut r = MdcapReader::open(&path).unwrap();
    assert_eq!(r.name(), path.display().to_string());
    for (i, m) in day.iter().enumerate() {
        let rec = r.next_record().unwrap().unwrap();
        assert_eq!(rec.timestamp_ns, m.timestamp().nanos());
        assert_eq!(rec.sequence, i as u64 + 1);
        assert_eq!(rec.data, m.bytes());
    }
    assert!(r.next_record().unwrap().is_none());
}

#[test]
fn truncation_at_every_byte_offset_is_reported_with_offset_and_record() {
    let recs: Vec<_> = records().into_iter().take(4).collect();
    let bytes = write_all(&recs);
    // Where each record starts; a cut exactly there is a clean end.
    let mut starts = vec![FILE_HEADER_LEN];
    for r in &recs {
        starts.push(starts.last().unwrap() + RECORD_HEADER_LEN + r.2.len());
    }
    for cut in 0..bytes.len() {
        let result = read_all("cut.mdcap", &bytes[..cut]);
        if cut == 0 {
            let e = result.unwrap_err();
            assert!(matches!(e, MdcapError::Empty { .. }), "{e:?}");
            assert_eq!(
                e.to_string(),
                "cut.mdcap is empty: an mdcap file starts with a 16-byte header"
            );
        } else if cut < FILE_HEADER_LEN {
            let e = result.unwrap_err();
            assert_eq!(
                e.to_string(),
                format!(
                    "cut.mdcap is truncated: the file ends {cut} bytes into the 16-byte mdcap \
                     file header"
                )
            );
        } else if let Some(k) = starts.iter().position(|&s| s == cut) {
            assert_eq!(result.unwrap(), recs[..k], "cut at the start of record {k}");
        } else {
            let k = starts.iter().rposition(|&s| s < cut).unwrap();
            let e = result.unwrap_err();
            let into = cut - starts[k];
            let what = if into < RECORD_HEADER_LEN {
                format!("ends {into} bytes into its 24-byte header")
            } else {
                format!(
                    "announces {} bytes but the file ends after {}",
                    recs[k].2.len(),
                    into - RECORD_HEADER_LEN
                )
            };
            assert_eq!(
                e.to_string(),
                format!(
                    "cut.mdcap is truncated at byte offset {}: record {k} {what}",
                    starts[k]
                ),
                "cut at {cut}"
            );
        }
    }
}

#[test]
fn a_file_of_something_else_is_not_an_mdcap_file() {
    let e = read_all(
        "x.pcap",
        &[0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0],
    )
    .unwrap_err();
    assert!(matches!(e, MdcapError::BadMagic { .. }), "{e:?}");
    assert_eq!(
        e.to_string(),
        "x.pcap is not an mdcap file: it starts with bytes d4 c3 b2 a1 02 00 04 00 \
         (\"........\"), not the magic \"MDBUSCAP\""
    );
    // Short files of something else are not called truncated.
    let e = read_all("short.txt", b"hi").unwrap_err();
    assert_eq!(
        e.to_string(),
        "short.txt is not an mdcap file: it starts with bytes 68 69 (\"hi\"), not the magic \
         \"MDBUSCAP\""
    );
    assert!(!has_magic(b"MDBUSCA"));
}

#[test]
fn another_version_is_refused_by_number() {
    let mut bytes = write_all(&records()[..1]);
    bytes[8..10].copy_from_slice(&3u16.to_le_bytes());
    let e = read_all("v3.mdcap", &bytes).unwrap_err();
    assert!(matches!(
        e,
        MdcapError::UnsupportedVersion { version: 3, .. }
    ));
    assert_eq!(
        e.to_string(),
        "v3.mdcap is mdcap format version 3; this build reads versions 1 and 2"
    );
}

/// A version 1 file, byte by byte as that format defined it.
fn version_1_file(recs: &[(u64, u64, Vec<u8>)]) -> Vec<u8> {
    let mut f = MAGIC.to_vec();
    f.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 0]);
    for (t, s, m) in recs {
        f.extend_from_slice(&t.to_le_bytes());
        f.extend_from_slice(&s.to_le_bytes());
        f.extend_from_slice(&(m.len() as u32).to_le_bytes());
        f.extend_from_slice(m);
    }
    f
}

#[test]
fn version_1_files_are_still_read_with_no_stream() {
    let recs = records();
    let v1 = version_1_file(&recs);
    assert_eq!(read_all("v1.mdcap", &v1).unwrap(), recs);
    let mut r = MdcapReader::new("v1.mdcap", &v1[..]).unwrap();
    assert_eq!((r.version(), r.streams().len()), (1, 0));
    while let Some(rec) = r.next_record().unwrap() {
        assert_eq!(rec.stream, STREAM_NONE);
    }
    // Truncation is reported against version 1's 20-byte header.
    let cut = FILE_HEADER_LEN + 5;
    assert_eq!(
        read_all("v1.mdcap", &v1[..cut]).unwrap_err().to_string(),
        format!(
            "v1.mdcap is truncated at byte offset {FILE_HEADER_LEN}: record 0 ends 5 bytes \
             into its {RECORD_HEADER_LEN_V1}-byte header"
        )
    );
}

#[test]
fn records_name_their_stream_from_the_file_table() {
    let names = ["md-1", "md-2", "ctl"];
    let mut w = MdcapWriter::with_streams("s.mdcap", Vec::new(), &names).unwrap();
    w.write_on(10, 1, 1, b"to md-2").unwrap();
    w.write_on(11, 2, STREAM_ALL, b"everywhere").unwrap();
    w.write_on(12, 3, STREAM_NONE, b"nowhere").unwrap();
    w.write_on(13, 4, 2, b"control").unwrap();
    let e = w.write_on(14, 5, 3, b"no such stream").unwrap_err();
    assert_eq!(
        e.to_string(),
        "cannot write to s.mdcap: stream index 3, but the file's stream table holds 3"
    );
    assert_eq!(w.records_written(), 4, "a refused record is not written");
    let bytes = w.finish().unwrap();
    assert_eq!(&bytes[10..12], &3u16.to_le_bytes());
    assert_eq!(&bytes[16..21], b"\x04md-1");

    let mut r = MdcapReader::new("s.mdcap", &bytes[..]).unwrap();
    assert_eq!(r.streams(), names);
    let mut got = Vec::new();
    while let Some(rec) = r.next_record().unwrap() {
        got.push((rec.sequence, rec.stream, rec.data.to_vec()));
    }
    assert_eq!(
        got,
        [
            (1, 1, b"to md-2".to_vec()),
            (2, STREAM_ALL, b"everywhere".to_vec()),
            (3, STREAM_NONE, b"nowhere".to_vec()),
            (4, 2, b"control".to_vec()),
        ]
    );
}

#[test]
fn a_damaged_stream_table_or_index_is_malformed() {
    let mut w = MdcapWriter::with_streams("t.mdcap", Vec::new(), &["a", "bb"]).unwrap();
    w.write_on(1, 1, 1, b"x").unwrap();
    let bytes = w.finish().unwrap();
    let table_end = FILE_HEADER_LEN + 2 + 3;

    // The table ends early: inside a name, and before the last name.
    let e = read_all("t.mdcap", &bytes[..FILE_HEADER_LEN + 3]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "t.mdcap is malformed at byte offset 18: the stream table ends inside name 1, which \
         announces 2 bytes"
    );
    let e = read_all("t.mdcap", &bytes[..FILE_HEADER_LEN + 2]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "t.mdcap is malformed at byte offset 18: the stream table ends after 1 of its 2 names"
    );
    // A name that is not UTF-8.
    let mut bad = bytes.clone();
    bad[FILE_HEADER_LEN + 1] = 0xff;
    let e = read_all("t.mdcap", &bad).unwrap_err();
    assert_eq!(
        e.to_string(),
        "t.mdcap is malformed at byte offset 16: the stream table name 0 is not UTF-8"
    );
    // A record naming a stream the table does not hold.
    let mut bad = bytes.clone();
    bad[table_end + 20..table_end + 22].copy_from_slice(&2u16.to_le_bytes());
    let e = read_all("t.mdcap", &bad).unwrap_err();
    assert!(
        matches!(e, MdcapError::BadStream { stream: 2, .. }),
        "{e:?}"
    );
    assert_eq!(
        e.to_string(),
        format!(
            "t.mdcap is malformed at byte offset {table_end}: record 0 names stream index 2, \
             but the file's stream table holds 2"
        )
    );
    // More names than the format allows.
    let mut bad = bytes.clone();
    bad[10..12].copy_from_slice(&u16::MAX.to_le_bytes());
    let e = read_all("t.mdcap", &bad).unwrap_err();
    assert_eq!(
        e.to_string(),
        "t.mdcap is malformed at byte offset 10: the stream table announces 65535 names, more \
         than 65534"
    );
}

#[test]
fn the_writer_refuses_names_the_format_cannot_hold() {
    let long = "x".repeat(256);
    let e = MdcapWriter::with_streams("n.mdcap", Vec::new(), &[long.as_str()]).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("cannot write to n.mdcap: stream name {long:?} is 256 bytes, more than 255")
    );
}

#[test]
fn an_impossible_length_is_malformed_not_an_allocation() {
    let mut bytes = write_all(&records()[..2]);
    let second = FILE_HEADER_LEN + RECORD_HEADER_LEN + 7;
    assert_eq!(RECORD_HEADER_LEN, 24);
    bytes[second + 16..second + 20].copy_from_slice(&u32::MAX.to_le_bytes());
    let e = read_all("bad.mdcap", &bytes).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "bad.mdcap is malformed at byte offset {second}: record 1 announces 4294967295 \
             bytes, more than the 65535 a record may hold"
        )
    );
}

#[test]
fn the_writer_refuses_an_oversized_message_and_writes_nothing() {
    let mut w = MdcapWriter::new("big.mdcap", Vec::new()).unwrap();
    let e = w.write(1, 1, &vec![0; MAX_MESSAGE_LEN + 1]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "cannot write to big.mdcap: a 65536-byte message exceeds the 65535-byte limit of an \
         mdcap record"
    );
    assert_eq!(w.records_written(), 0);
    assert_eq!(w.finish().unwrap(), {
        let mut h = MAGIC.to_vec();
        h.extend_from_slice(&[2, 0, 0, 0, 0, 0, 0, 0]);
        h
    });
}

#[test]
fn a_missing_file_is_named() {
    let e = MdcapReader::open("/nonexistent/dir/x.mdcap").unwrap_err();
    assert!(
        e.to_string()
            .starts_with("cannot open /nonexistent/dir/x.mdcap: "),
        "{e}"
    );
}

#[test]
fn reading_and_writing_allocate_nothing_per_record() {
    let recs = records();
    let mut out = Vec::with_capacity(4 << 20);
    let mut w = MdcapWriter::new("alloc.mdcap", &mut out).unwrap();
    let info = measure(|| {
        for _ in 0..20 {
            for (t, s, m) in &recs {
                w.write(*t, *s, m).unwrap();
            }
        }
    });
    assert_eq!(info.count_total, 0, "writing: {info:?}");
    w.finish().unwrap();
    let mut r = MdcapReader::new("alloc.mdcap", &out[..]).unwrap();
    let mut n = 0;
    let info = measure(|| {
        while let Some(rec) = r.next_record().unwrap() {
            std::hint::black_box(rec.data);
            n += 1;
        }
    });
    assert_eq!(info.count_total, 0, "reading: {info:?}");
    assert_eq!(n, 20 * recs.len());
}
