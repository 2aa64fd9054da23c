//! GPT-2's byte-level alphabet: every byte is shown as one printable Unicode
//! character so that byte-level BPE vocabularies can be stored as text.
//!
//! Bytes `!`..=`~`, `¡`..=`¬` and `®`..=`ÿ` stand for themselves; the other 68
//! bytes are mapped, in increasing byte order, to U+0100, U+0101, ...

/// The character that stands for each byte.
pub fn byte_to_char_table() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut next = 256u32;
    for b in 0..=255u8 {
        let printable = (b'!'..=b'~').contains(&b) || (0xA1..=0xAC).contains(&b) || b >= 0xAE;
        table[b as usize] = if printable {
            char::from(b)
        } else {
            let c = char::from_u32(next).expect("U+0100..U+0143 are valid chars");
            next += 1;
            c
        };
    }
    table
}

/// Decode a byte-level token text back into the bytes it stands for.
/// Characters outside the alphabet are kept as their own UTF-8 bytes.
pub fn decode_token_text(
    text: &str,
    char_to_byte: &std::collections::HashMap<char, u8>,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    for c in text.chars() {
        match char_to_byte.get(&c) {
            Some(&b) => out.push(b),
            None => {
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_positions_of_the_alphabet() {
        let t = byte_to_char_table();
        assert_eq!(t[b'A' as usize], 'A');
        assert_eq!(t[b' ' as usize], 'Ġ'); // U+0120
        assert_eq!(t[b'\n' as usize], 'Ċ'); // U+010A
        assert_eq!(t[0], '\u{100}');
        assert_eq!(t[0xAD], '\u{143}');
        let distinct: std::collections::HashSet<char> = t.iter().copied().collect();
        assert_eq!(distinct.len(), 256);
    }
}
