//! Sign-in and password pages. Plain HTML forms posting to the server's `/auth/*`
//! handlers, so they work the same with or without JavaScript.

use crate::i18n::*;
use crate::locale::{current, Locale};
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;

/// What the sign-in handler's `?error=` codes mean to a person.
pub fn sign_in_message(loc: Locale, code: &str) -> &'static str {
    match code {
        "invalid" => td_string!(loc, access.err_invalid),
        "limited" => td_string!(loc, access.err_limited),
        "unavailable" => td_string!(loc, access.err_unavailable),
        _ => td_string!(loc, access.err_other),
    }
}

pub fn password_message(loc: Locale, code: &str) -> &'static str {
    match code {
        "mismatch" => td_string!(loc, access.pw_mismatch),
        "weak" => td_string!(loc, access.pw_weak),
        "same" => td_string!(loc, access.pw_same),
        "current" => td_string!(loc, access.pw_current),
        "limited" => td_string!(loc, access.pw_limited),
        "unavailable" => td_string!(loc, access.err_unavailable),
        _ => td_string!(loc, access.pw_other),
    }
}

#[component]
pub fn SignInPage() -> impl IntoView {
    let query = use_query_map();
    let error = move || query.with(|q| q.get("error"));
    let next = move || query.with(|q| q.get("next")).unwrap_or_else(|| "/".into());
    let signed_out = move || query.with(|q| q.get("signed_out").is_some());
    let loc = current();
    view! {
        <Title text=td_string!(loc, access.sign_in)/>
        <section class="panel auth-panel">
            <h1>{td_string!(loc, access.sign_in)}</h1>
            {move || error().map(|code| view! {
                <p class="form-error" role="alert">{sign_in_message(loc, &code)}</p>
            })}
            {move || (signed_out() && error().is_none()).then(|| view! {
                <p class="form-note">{td_string!(loc, access.signed_out)}</p>
            })}
            <form method="post" action="/auth/sign-in" class="stack" id="sign-in-form">
                <input type="hidden" name="next" value=next/>
                <label>
                    {td_string!(loc, access.user_name)}
                    <input type="text" name="username" autocomplete="username" required autofocus/>
                </label>
                <label>
                    {td_string!(loc, access.password)}
                    <input type="password" name="password" autocomplete="current-password" required/>
                </label>
                <button type="submit" class="button primary">{td_string!(loc, access.sign_in)}</button>
            </form>
        </section>
    }
}

#[component]
pub fn ChangePasswordPage() -> impl IntoView {
    let query = use_query_map();
    let error = move || query.with(|q| q.get("error"));
    let loc = current();
    view! {
        <Title text=td_string!(loc, access.change_title)/>
        <section class="panel auth-panel">
            <h1>{td_string!(loc, access.choose_new)}</h1>
            <p class="form-note">{td_string!(loc, access.must_replace)}</p>
            {move || error().map(|code| view! {
                <p class="form-error" role="alert">{password_message(loc, &code)}</p>
            })}
            <form method="post" action="/auth/password" class="stack" id="password-form">
                <label>
                    {td_string!(loc, access.current)}
                    <input type="password" name="current" autocomplete="current-password" required/>
                </label>
                <label>
                    {td_string!(loc, access.new_password)}
                    <input type="password" name="new" autocomplete="new-password" minlength="12" required/>
                </label>
                <label>
                    {td_string!(loc, access.again)}
                    <input type="password" name="confirm" autocomplete="new-password" minlength="12" required/>
                </label>
                <button type="submit" class="button primary">{td_string!(loc, access.change_title)}</button>
            </form>
        </section>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_code_the_server_sends_has_its_own_message() {
        for loc in [Locale::en, Locale::pt_BR] {
            let generic = sign_in_message(loc, "?");
            for code in ["invalid", "limited", "unavailable"] {
                assert_ne!(sign_in_message(loc, code), generic, "{code}");
            }
            let generic = password_message(loc, "?");
            for code in [
                "mismatch",
                "weak",
                "same",
                "current",
                "limited",
                "unavailable",
            ] {
                assert_ne!(password_message(loc, code), generic, "{code}");
            }
        }
    }
}
