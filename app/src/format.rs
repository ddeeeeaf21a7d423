//! Small pure helpers that turn view data into what a person reads. The `*_in` forms take
//! the viewer's locale; the others are the English ones.

use crate::locale::Locale;

/// `2025-11-29T21:03:12.123456Z` → `2025-11-29 21:03:12`. The column header says UTC, so
/// the zone suffix and sub-second digits are noise. Anything that doesn't look like RFC 3339
/// is shown unchanged rather than hidden.
pub fn short_timestamp(rfc3339: &str) -> String {
    let bytes = rfc3339.as_bytes();
    let digit = |i: usize| bytes[i].is_ascii_digit();
    let looks_like_rfc3339 = bytes.len() >= 19
        && [0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18]
            .into_iter()
            .all(digit)
        && bytes[4] == b'-'
        && bytes[7] == b'-'
        && matches!(bytes[10], b'T' | b't' | b' ')
        && bytes[13] == b':'
        && bytes[16] == b':';
    if looks_like_rfc3339 {
        format!("{} {}", &rfc3339[..10], &rfc3339[11..19])
    } else {
        rfc3339.to_string()
    }
}

/// Unix milliseconds of an RFC 3339 UTC time as the server writes them
/// (`2026-12-01T05:20:02.898Z`); `None` for anything else.
pub fn epoch_ms(rfc3339: &str) -> Option<i64> {
    if short_timestamp(rfc3339).len() != 19 || rfc3339.len() < 20 {
        return None;
    }
    let num = |from: usize, to: usize| rfc3339.get(from..to)?.parse::<i64>().ok();
    let (y, m, d) = (num(0, 4)?, num(5, 7)?, num(8, 10)?);
    let (hh, mm, ss) = (num(11, 13)?, num(14, 16)?, num(17, 19)?);
    let rest = &rfc3339[19..];
    let (millis, zone) = match rest.strip_prefix('.') {
        Some(frac) => {
            let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
            let ms = format!("{:0<3}", &frac[..digits.min(3)])
                .parse::<i64>()
                .ok()?;
            (ms, &frac[digits..])
        }
        None => (0, rest),
    };
    if !matches!(zone, "Z" | "z" | "+00:00") || !(1..=12).contains(&m) {
        return None;
    }
    // Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((m + 9) % 12) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(((days * 24 + hh) * 60 + mm) * 60_000 + ss * 1000 + millis)
}

/// The RFC 3339 UTC time (`2026-12-01T05:20:02.898Z`) of Unix milliseconds: the inverse
/// of [`epoch_ms`] (Howard Hinnant's civil-from-days).
pub fn rfc3339_of_ms(ms: i64) -> String {
    let days = ms.div_euclid(86_400_000);
    let in_day = ms.rem_euclid(86_400_000);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        in_day / 3_600_000,
        in_day / 60_000 % 60,
        in_day / 1000 % 60,
        in_day % 1000
    )
}

/// How long ago, for people: `just now`, `45 s ago`, `12 min ago`, `3 h 10 min ago`; a
/// time in the future reads `in 5 min`.
pub fn ago(then_ms: i64, now_ms: i64) -> String {
    let secs = (now_ms - then_ms) / 1000;
    match secs {
        -4..=4 => "just now".to_string(),
        s if s < 0 => format!("in {}", age(-s)),
        s => format!("{} ago", age(s)),
    }
}

/// A UTC offset in minutes east as people write it: `UTC`, `UTC+1`, `UTC+5:30`, `UTC-8`.
pub fn offset_label(minutes_east: i32) -> String {
    let sign = if minutes_east < 0 { '-' } else { '+' };
    let m = minutes_east.unsigned_abs();
    match (m / 60, m % 60) {
        (0, 0) => "UTC".to_string(),
        (h, 0) => format!("UTC{sign}{h}"),
        (h, mm) => format!("UTC{sign}{h}:{mm:02}"),
    }
}

/// The CSS modifier for a processing status. Statuses come from the database as free text,
/// so only known ones become class names; anything else gets a neutral look.
pub fn status_class(status: &str) -> &'static str {
    match status {
        "applied" => "badge badge-ok",
        "pending" | "processing" => "badge badge-info",
        "stale" => "badge badge-warn",
        "refused" | "failed" | "dead" => "badge badge-bad",
        "duplicate" | "ignored" => "badge badge-muted",
        _ => "badge badge-unknown",
    }
}

/// A compact age: `45 s`, `12 min`, `3 h 10 min`, `2 d 4 h`.
pub fn age(secs: i64) -> String {
    let secs = secs.max(0);
    match secs {
        0..=59 => format!("{secs} s"),
        60..=3_599 => format!("{} min", secs / 60),
        3_600..=86_399 => match (secs % 3_600) / 60 {
            0 => format!("{} h", secs / 3_600),
            m => format!("{} h {m} min", secs / 3_600),
        },
        _ => match (secs % 86_400) / 3_600 {
            0 => format!("{} d", secs / 86_400),
            h => format!("{} d {h} h", secs / 86_400),
        },
    }
}

/// The decimals of a currency's minor unit, as payment providers apply ISO 4217 (Stripe's
/// zero- and three-decimal lists).
pub fn decimals(currency: &str) -> u32 {
    match currency.to_ascii_uppercase().as_str() {
        "BIF" | "CLP" | "DJF" | "GNF" | "JPY" | "KMF" | "KRW" | "MGA" | "PYG" | "RWF" | "UGX"
        | "VND" | "VUV" | "XAF" | "XOF" | "XPF" => 0,
        "BHD" | "JOD" | "KWD" | "OMR" | "TND" => 3,
        _ => 2,
    }
}

/// An amount a person typed in a currency's major units (`12.5`, `1,234.56`, `12`) as minor
/// units; an error that says what is wrong otherwise (more decimals than the currency has,
/// not a number, zero or less, absurdly large).
pub fn parse_money(text: &str, currency: &str) -> Result<i64, String> {
    let digits = decimals(currency) as usize;
    // "12.50 EUR" as the page shows amounts: the currency's own code may stay.
    let code = currency.to_ascii_uppercase();
    let upper = text.trim().to_ascii_uppercase();
    let bare = upper
        .strip_suffix(&code)
        .or_else(|| upper.strip_prefix(&code))
        .unwrap_or(&upper);
    let plain: String = bare.chars().filter(|c| *c != ',' && *c != ' ').collect();
    let (whole, frac) = plain.split_once('.').unwrap_or((&plain, ""));
    let numeric = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() && frac.is_empty() || !numeric(whole) || !numeric(frac) {
        return Err(format!("{text:?} is not an amount (write it like 12.50)"));
    }
    if frac.len() > digits {
        return Err(format!(
            "{} has {digits} decimal{}: {text:?} has more",
            currency.to_ascii_uppercase(),
            if digits == 1 { "" } else { "s" }
        ));
    }
    let scale = 10i64.pow(digits as u32);
    let frac_minor = format!("{frac:0<digits$}");
    let minor = whole
        .parse::<i64>()
        .unwrap_or(0)
        .checked_mul(scale)
        .zip(if digits == 0 {
            Some(0)
        } else {
            frac_minor.parse::<i64>().ok()
        })
        .and_then(|(w, f)| w.checked_add(f))
        .filter(|m| *m < 1_000_000_000_000)
        .ok_or_else(|| format!("{text:?} is too large"))?;
    if whole.len() > 15 {
        return Err(format!("{text:?} is too large"));
    }
    if minor <= 0 {
        return Err("the amount must be more than zero".into());
    }
    Ok(minor)
}

/// Minor units as a person reads them: `123456, "EUR"` → `1,234.56 EUR`. The number of
/// decimals follows ISO 4217 as payment providers apply it (Stripe's zero- and
/// three-decimal lists); without a currency the minor units are shown as they are.
pub fn money(minor: i64, currency: Option<&str>) -> String {
    let Some(currency) = currency else {
        return group_thousands(minor.unsigned_abs(), minor < 0);
    };
    let code = currency.to_ascii_uppercase();
    let decimals = decimals(&code);
    let scale = 10u64.pow(decimals);
    let abs = minor.unsigned_abs();
    let whole = group_thousands(abs / scale, minor < 0);
    if decimals == 0 {
        format!("{whole} {code}")
    } else {
        let fraction = abs % scale;
        format!(
            "{whole}.{fraction:0width$} {code}",
            width = decimals as usize
        )
    }
}

/// `1234567` → `1,234,567`.
pub fn thousands(v: i64) -> String {
    group_thousands(v.unsigned_abs(), v < 0)
}

fn group_thousands(value: u64, negative: bool) -> String {
    let digits = value.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3 + 1);
    if negative {
        out.push('−');
    }
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// How numbers are written in a locale: the decimal and the thousands separators.
fn separators(locale: Locale) -> (char, char) {
    match locale {
        Locale::en => ('.', ','),
        Locale::pt_BR => (',', '.'),
    }
}

/// `1234567` → `1,234,567` (en) or `1.234.567` (pt-BR).
pub fn thousands_in(locale: Locale, v: i64) -> String {
    let (_, group) = separators(locale);
    thousands(v).replace(',', &group.to_string())
}

/// A decimal with `places` digits after the separator: `6.2` (en), `6,2` (pt-BR).
pub fn decimal_in(locale: Locale, v: f64, places: usize) -> String {
    let (dec, _) = separators(locale);
    format!("{v:.places$}").replace('.', &dec.to_string())
}

/// A percentage: `6.2 %` (en), `6,2 %` (pt-BR).
pub fn pct_in(locale: Locale, v: Option<f64>) -> String {
    v.map(|p| format!("{} %", decimal_in(locale, p, 1)))
        .unwrap_or_else(|| "–".into())
}

/// Minor units in the order's currency, written the way the viewer's locale writes money:
/// en as [`money`] (`1,234.56 BRL`); pt-BR with the currency's sign in front where
/// Brazilians write one (`R$ 1.234,56`, `US$ 5,00`, `€ 12,50`) and the code otherwise
/// (`JPY 1.000`). Without a currency, the minor units grouped as a number.
pub fn money_in(locale: Locale, minor: i64, currency: Option<&str>) -> String {
    match locale {
        Locale::en => money(minor, currency),
        Locale::pt_BR => {
            let Some(currency) = currency else {
                return thousands_in(locale, minor);
            };
            let code = currency.to_ascii_uppercase();
            let decimals = decimals(&code);
            let scale = 10u64.pow(decimals);
            let abs = minor.unsigned_abs();
            let whole = thousands_in(locale, (abs / scale).min(i64::MAX as u64) as i64);
            let number = if decimals == 0 {
                whole
            } else {
                format!("{whole},{:0width$}", abs % scale, width = decimals as usize)
            };
            let sign = match code.as_str() {
                "BRL" => "R$",
                "USD" => "US$",
                "EUR" => "€",
                "GBP" => "£",
                _ => code.as_str(),
            };
            let minus = if minor < 0 { "−" } else { "" };
            format!("{minus}{sign}\u{a0}{number}")
        }
    }
}

/// [`parse_money`] as the viewer writes amounts: in pt-BR the comma is the decimal
/// separator and the dot groups thousands (`1.234,56`, `12,5`).
pub fn parse_money_in(locale: Locale, text: &str, currency: &str) -> Result<i64, String> {
    match locale {
        Locale::en => parse_money(text, currency),
        Locale::pt_BR => {
            // Swap the two separators and reuse the English parser.
            let swapped: String = text
                .chars()
                .map(|c| match c {
                    ',' => '.',
                    '.' => ',',
                    other => other,
                })
                .collect();
            let swapped = swapped.replace("R$", "");
            parse_money(&swapped, currency).map_err(|_| {
                crate::i18n::td_string!(Locale::pt_BR, format.bad_amount, text = text).to_string()
            })
        }
    }
}

/// A date and time as the locale writes it: `2026-12-01 05:20:02` (en),
/// `01/12/2026 05:20:02` (pt-BR).
pub fn datetime_parts_in(
    locale: Locale,
    (y, m, d): (i64, i64, i64),
    (hh, mm, ss): (i64, i64, i64),
) -> String {
    match locale {
        Locale::en => format!("{y:04}-{m:02}-{d:02} {hh:02}:{mm:02}:{ss:02}"),
        Locale::pt_BR => format!("{d:02}/{m:02}/{y:04} {hh:02}:{mm:02}:{ss:02}"),
    }
}

/// [`short_timestamp`] in the viewer's locale (still UTC: the caller says so).
pub fn short_timestamp_in(locale: Locale, rfc3339: &str) -> String {
    let short = short_timestamp(rfc3339);
    let b = short.as_bytes();
    if locale == Locale::en || b.len() != 19 || b[4] != b'-' || b[10] != b' ' {
        return short;
    }
    let num = |from: usize, to: usize| short.get(from..to).and_then(|t| t.parse::<i64>().ok());
    match (
        num(0, 4),
        num(5, 7),
        num(8, 10),
        num(11, 13),
        num(14, 16),
        num(17, 19),
    ) {
        (Some(y), Some(m), Some(d), Some(hh), Some(mm), Some(ss)) => {
            datetime_parts_in(locale, (y, m, d), (hh, mm, ss))
        }
        _ => short,
    }
}

/// [`ago`] in the viewer's locale: `3 h 10 min ago` / `há 3 h 10 min`, `just now` /
/// `agora mesmo`, `in 5 min` / `em 5 min`.
pub fn ago_in(locale: Locale, then_ms: i64, now_ms: i64) -> String {
    use crate::i18n::td_string;
    let secs = (now_ms - then_ms) / 1000;
    match secs {
        -4..=4 => td_string!(locale, time.just_now).to_string(),
        s if s < 0 => td_string!(locale, time.in_future, age = age(-s)).to_string(),
        s => td_string!(locale, time.ago, age = age(s)).to_string(),
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn amounts_typed_in_major_units_become_minor_units() {
        use super::parse_money;
        assert_eq!(parse_money("12.50", "eur"), Ok(1_250));
        assert_eq!(parse_money("12.5", "EUR"), Ok(1_250));
        assert_eq!(parse_money("1,234.56", "USD"), Ok(123_456));
        assert_eq!(parse_money(" 7 ", "EUR"), Ok(700));
        assert_eq!(parse_money("1,234.56 EUR", "eur"), Ok(123_456));
        assert_eq!(parse_money(".5", "EUR"), Ok(50));
        assert_eq!(parse_money("500", "JPY"), Ok(500));
        assert_eq!(parse_money("1.234", "KWD"), Ok(1_234));
        for (bad, why) in [
            ("12.345", "2 decimals"),
            ("5.5", "0 decimals"),
            ("abc", "not an amount"),
            ("-3", "not an amount"),
            ("", "not an amount"),
            (".", "not an amount"),
            ("0.00", "more than zero"),
            ("99999999999999999999", "too large"),
        ] {
            let currency = if bad == "5.5" { "JPY" } else { "EUR" };
            let e = parse_money(bad, currency).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn rfc3339_of_ms_is_the_inverse_of_epoch_ms() {
        for ms in [
            0,
            951_782_400_123,
            1_700_000_000_000,
            1_764_566_402_898,
            4_102_444_799_999,
            -86_400_001,
        ] {
            let text = super::rfc3339_of_ms(ms);
            assert_eq!(super::epoch_ms(&text), Some(ms), "{text}");
        }
        assert_eq!(
            super::rfc3339_of_ms(1_700_000_000_000),
            "2023-11-14T22:13:20.000Z"
        );
    }

    use super::*;

    #[test]
    fn rfc3339_as_the_server_writes_it_reads_as_epoch_milliseconds() {
        assert_eq!(epoch_ms("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            epoch_ms("2026-12-01T05:20:02.898Z"),
            Some(1_796_102_402_898)
        );
        assert_eq!(epoch_ms("2000-02-29T23:59:59.5Z"), Some(951_868_799_500));
        assert_eq!(
            epoch_ms("2026-12-01T05:20:02+00:00"),
            Some(1_796_102_402_000)
        );
        for bad in [
            "",
            "yesterday",
            "2026-13-01T00:00:00Z",
            "2026-12-01T05:20:02+01:00",
            "2026-12-01 05:20",
        ] {
            assert_eq!(epoch_ms(bad), None, "{bad}");
        }
    }

    #[test]
    fn ages_and_offsets_read_as_people_write_them() {
        assert_eq!(ago(0, 2_000), "just now");
        assert_eq!(ago(0, 45_000), "45 s ago");
        assert_eq!(ago(0, 11_400_000), "3 h 10 min ago");
        assert_eq!(ago(300_000, 0), "in 5 min");
        assert_eq!(offset_label(0), "UTC");
        assert_eq!(offset_label(60), "UTC+1");
        assert_eq!(offset_label(330), "UTC+5:30");
        assert_eq!(offset_label(-480), "UTC-8");
    }

    #[test]
    fn money_reads_in_the_currency_s_own_decimals() {
        assert_eq!(money(123_456, Some("eur")), "1,234.56 EUR");
        assert_eq!(money(5, Some("USD")), "0.05 USD");
        assert_eq!(money(-2_500, Some("USD")), "−25.00 USD");
        assert_eq!(money(1_000, Some("JPY")), "1,000 JPY");
        assert_eq!(money(1_234, Some("KWD")), "1.234 KWD");
        assert_eq!(money(1_000_000, None), "1,000,000");
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(-1_000), "−1,000");
        assert_eq!(
            money(i64::MIN, Some("USD")),
            "−92,233,720,368,547,758.08 USD"
        );
    }

    #[test]
    fn ages_read_at_a_glance() {
        assert_eq!(age(-5), "0 s");
        assert_eq!(age(45), "45 s");
        assert_eq!(age(60), "1 min");
        assert_eq!(age(3_599), "59 min");
        assert_eq!(age(3_600), "1 h");
        assert_eq!(age(11_400), "3 h 10 min");
        assert_eq!(age(86_400), "1 d");
        assert_eq!(age(187_200), "2 d 4 h");
    }

    #[test]
    fn drops_fraction_and_zone() {
        assert_eq!(
            short_timestamp("2025-11-29T21:03:12.123456Z"),
            "2025-11-29 21:03:12"
        );
        assert_eq!(
            short_timestamp("2025-11-29T21:03:12+00:00"),
            "2025-11-29 21:03:12"
        );
    }

    #[test]
    fn leaves_unexpected_text_alone() {
        assert_eq!(short_timestamp("yesterday"), "yesterday");
        assert_eq!(short_timestamp(""), "");
        assert_eq!(
            short_timestamp("2025-11-29T21:03:1é"),
            "2025-11-29T21:03:1é"
        );
        assert_eq!(
            short_timestamp("2025-11-29 oops and more"),
            "2025-11-29 oops and more"
        );
    }

    #[test]
    fn every_documented_status_has_a_colour() {
        for status in [
            "pending",
            "processing",
            "applied",
            "duplicate",
            "stale",
            "refused",
            "ignored",
            "failed",
            "dead",
        ] {
            assert_ne!(status_class(status), "badge badge-unknown", "{status}");
        }
        assert_eq!(status_class("\" onmouseover=\"x"), "badge badge-unknown");
    }

    #[test]
    fn money_reads_in_the_viewers_locale() {
        let pt = Locale::pt_BR;
        assert_eq!(money_in(pt, 123_456, Some("brl")), "R$\u{a0}1.234,56");
        assert_eq!(money_in(pt, 10_990, Some("BRL")), "R$\u{a0}109,90");
        assert_eq!(money_in(pt, 500, Some("USD")), "US$\u{a0}5,00");
        assert_eq!(money_in(pt, -2_500, Some("BRL")), "−R$\u{a0}25,00");
        assert_eq!(money_in(pt, 1_000, Some("JPY")), "JPY\u{a0}1.000");
        assert_eq!(money_in(pt, 1_234, Some("KWD")), "KWD\u{a0}1,234");
        assert_eq!(money_in(pt, 1_000_000, None), "1.000.000");
        assert_eq!(money_in(Locale::en, 123_456, Some("BRL")), "1,234.56 BRL");
        assert_eq!(money_in(Locale::en, 10_990, Some("eur")), "109.90 EUR");
        assert_eq!(thousands_in(pt, 48_210), "48.210");
        assert_eq!(pct_in(pt, Some(6.25)), "6,2 %");
        assert_eq!(pct_in(Locale::en, Some(6.25)), "6.2 %");
    }

    #[test]
    fn amounts_typed_in_portuguese_use_the_decimal_comma() {
        let pt = Locale::pt_BR;
        assert_eq!(parse_money_in(pt, "12,50", "BRL"), Ok(1_250));
        assert_eq!(parse_money_in(pt, "1.234,56", "BRL"), Ok(123_456));
        assert_eq!(parse_money_in(pt, "R$ 109,90", "BRL"), Ok(10_990));
        assert_eq!(parse_money_in(pt, "7", "BRL"), Ok(700));
        assert!(parse_money_in(pt, "12,345", "BRL").is_err());
        assert_eq!(parse_money_in(Locale::en, "12.50", "BRL"), Ok(1_250));
    }

    #[test]
    fn dates_and_ages_read_in_the_viewers_locale() {
        let pt = Locale::pt_BR;
        assert_eq!(
            short_timestamp_in(pt, "2026-12-01T05:20:02.898Z"),
            "01/12/2026 05:20:02"
        );
        assert_eq!(
            short_timestamp_in(Locale::en, "2026-12-01T05:20:02.898Z"),
            "2026-12-01 05:20:02"
        );
        assert_eq!(short_timestamp_in(pt, "yesterday"), "yesterday");
        assert_eq!(
            datetime_parts_in(pt, (2026, 3, 9), (7, 5, 1)),
            "09/03/2026 07:05:01"
        );
        assert_eq!(ago_in(pt, 0, 2_000), "agora mesmo");
        assert_eq!(ago_in(pt, 0, 11_400_000), "há 3 h 10 min");
        assert_eq!(ago_in(pt, 300_000, 0), "em 5 min");
        assert_eq!(ago_in(Locale::en, 0, 45_000), "45 s ago");
        assert_eq!(ago_in(Locale::en, 0, 2_000), "just now");
    }
}
