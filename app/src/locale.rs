//! Which language a page is in. The server decides (the signed-in user's setting, else the
//! request's `Accept-Language`, else English) and provides it as [`RequestLocale`]; the
//! shell writes it into `<html lang>`, where hydration reads it back (leptos_i18n does), so
//! the browser renders the same words the server sent: no flash, no hydration mismatch.

pub use crate::i18n::Locale;
use leptos::prelude::*;
use leptos_i18n::Locale as _;

/// The locale the server chose for this request (web::dashboard provides it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestLocale(pub Locale);

/// The signed-in user's own choice (`users.locale`), as the server's session middleware
/// puts it in the request: `None` follows the browser.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserLocaleSetting(pub Option<String>);

/// The tag a locale is stored and sent as: `en`, `pt-BR`.
pub fn tag(locale: Locale) -> &'static str {
    locale.as_str()
}

/// Every locale the dashboard speaks, the default (English) first.
pub fn all() -> &'static [Locale] {
    Locale::get_all()
}

/// A stored or submitted tag, exactly as [`tag`] writes it (case-insensitive); `None` for
/// anything else, including an empty value ("follow the browser").
pub fn parse(text: &str) -> Option<Locale> {
    let text = text.trim();
    all()
        .iter()
        .copied()
        .find(|l| l.as_str().eq_ignore_ascii_case(text))
}

/// The best supported locale for an `Accept-Language` header (RFC 9110 §12.5.4: q-values,
/// `*`, language ranges such as `pt` or `pt-PT` for the only Portuguese there is); `None`
/// when nothing in it is supported.
pub fn negotiate(accept_language: &str) -> Option<Locale> {
    let mut ranges: Vec<(String, f32, usize)> = accept_language
        .split(',')
        .enumerate()
        .filter_map(|(i, part)| {
            let mut pieces = part.split(';');
            let range = pieces.next()?.trim();
            if range.is_empty() || range == "*" || range.len() > 35 {
                return None;
            }
            let q = pieces
                .filter_map(|p| p.trim().strip_prefix("q="))
                .find_map(|q| q.trim().parse::<f32>().ok())
                .unwrap_or(1.0);
            (q > 0.0).then(|| (range.to_ascii_lowercase(), q, i))
        })
        .collect();
    ranges.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.2.cmp(&b.2)));
    ranges.into_iter().find_map(|(range, _, _)| {
        let primary = range.split(['-', '_']).next().unwrap_or_default();
        all().iter().copied().find(|l| {
            let ours = l.as_str().to_ascii_lowercase();
            ours == range || ours.split('-').next() == Some(primary)
        })
    })
}

/// The user's own setting first, then the browser's `Accept-Language`, then English.
pub fn resolve(user_setting: Option<&str>, accept_language: Option<&str>) -> Locale {
    user_setting
        .and_then(parse)
        .or_else(|| accept_language.and_then(negotiate))
        .unwrap_or_default()
}

/// Sets up leptos_i18n's context for the app: on the server with the locale the server
/// chose (no cookie, no header of its own), in the browser from `<html lang>`.
pub fn provide_i18n() -> leptos_i18n::I18nContext<Locale> {
    use leptos_i18n::context::UseLocalesOptions;
    use leptos_i18n::context::{init_i18n_context_with_options, I18nContextOptions};
    let chosen = use_context::<RequestLocale>()
        .map(|l| l.0)
        .unwrap_or_default();
    // What leptos_i18n reads as the request's languages while the server renders.
    let header = move || Some(chosen.as_str().to_string());
    let options = I18nContextOptions::<Locale>::default()
        .enable_cookie(false)
        .ssr_lang_header_getter(UseLocalesOptions::default().ssr_lang_header_getter(header));
    let ctx = init_i18n_context_with_options::<Locale>(options);
    provide_context(ctx);
    ctx
}

/// The page's locale, read once (a change of language reloads the page).
pub fn current() -> Locale {
    use_context::<leptos_i18n::I18nContext<Locale>>()
        .map(|ctx| ctx.get_locale_untracked())
        .or_else(|| use_context::<RequestLocale>().map(|l| l.0))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_language_picks_the_best_supported_language() {
        assert_eq!(negotiate("pt-BR,pt;q=0.9,en;q=0.8"), Some(Locale::pt_BR));
        assert_eq!(negotiate("pt"), Some(Locale::pt_BR));
        assert_eq!(negotiate("pt-PT"), Some(Locale::pt_BR));
        assert_eq!(negotiate("en-US,en;q=0.9"), Some(Locale::en));
        assert_eq!(negotiate("fr-FR,pt;q=0.5,en;q=0.4"), Some(Locale::pt_BR));
        assert_eq!(negotiate("en;q=0.4,pt-br;q=0.8"), Some(Locale::pt_BR));
        assert_eq!(negotiate("pt;q=0,en"), Some(Locale::en));
        assert_eq!(negotiate("de-DE, fr"), None);
        assert_eq!(negotiate("*"), None);
        assert_eq!(negotiate(""), None);
    }

    #[test]
    fn the_users_setting_wins_then_the_browser_then_english() {
        assert_eq!(resolve(Some("pt-BR"), Some("en")), Locale::pt_BR);
        assert_eq!(resolve(Some("en"), Some("pt-BR")), Locale::en);
        assert_eq!(resolve(None, Some("pt-BR")), Locale::pt_BR);
        assert_eq!(resolve(Some(""), Some("pt-BR")), Locale::pt_BR);
        assert_eq!(resolve(Some("xx"), Some("de")), Locale::en);
        assert_eq!(resolve(None, None), Locale::en);
        assert_eq!(parse("PT-br"), Some(Locale::pt_BR));
        assert_eq!(tag(Locale::pt_BR), "pt-BR");
    }

    /// leptos_i18n falls back to English for a key missing in pt-BR.json and only warns at
    /// build time: this makes the gap a failing test, in either direction.
    #[test]
    fn locale_files_have_the_same_keys() {
        fn keys(prefix: &str, value: &serde_json::Value, out: &mut Vec<String>) {
            match value {
                serde_json::Value::Object(map) => {
                    for (k, v) in map {
                        let path = if prefix.is_empty() {
                            k.clone()
                        } else {
                            format!("{prefix}.{k}")
                        };
                        keys(&path, v, out);
                    }
                }
                _ => out.push(prefix.to_string()),
            }
        }
        let read = |name: &str| -> Vec<String> {
            let path = format!("{}/locales/{name}", env!("CARGO_MANIFEST_DIR"));
            let text = std::fs::read_to_string(&path).unwrap();
            let json: serde_json::Value = serde_json::from_str(&text).unwrap();
            let mut out = Vec::new();
            keys("", &json, &mut out);
            out.sort();
            out
        };
        let en = read("en.json");
        let pt = read("pt-BR.json");
        let missing_pt: Vec<_> = en.iter().filter(|k| !pt.contains(k)).collect();
        let missing_en: Vec<_> = pt.iter().filter(|k| !en.contains(k)).collect();
        assert!(
            missing_pt.is_empty(),
            "missing in pt-BR.json: {missing_pt:?}"
        );
        assert!(missing_en.is_empty(), "missing in en.json: {missing_en:?}");
        assert!(en.len() > 10, "{en:?}");
    }

    /// Portuguese is written in sentence case and never shouted in Title Case: a label that
    /// starts lower-case in English starts lower-case in Portuguese too, and no Portuguese
    /// text capitalises "de", "da", "do", "e" inside a phrase.
    #[test]
    fn portuguese_reads_in_sentence_case() {
        let text =
            std::fs::read_to_string(format!("{}/locales/pt-BR.json", env!("CARGO_MANIFEST_DIR")))
                .unwrap();
        for small in [
            " De ", " Da ", " Do ", " Das ", " Dos ", " E ", " Em ", " Para ",
        ] {
            assert!(!text.contains(small), "Title Case {small:?} in pt-BR.json");
        }
    }
}
