//! Sign-in and password pages. Plain HTML forms posting to the server's `/auth/*`
//! handlers, so they work the same with or without JavaScript.

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;

/// What the sign-in handler's `?error=` codes mean to a person.
pub fn sign_in_message(code: &str) -> &'static str {
    match code {
        "invalid" => "That user name and password do not match an active user.",
        "limited" => "Too many sign-in attempts. Wait a minute and try again.",
        "unavailable" => "The user store is not answering. Try again shortly.",
        _ => "Sign-in failed. Try again.",
    }
}

pub fn password_message(code: &str) -> &'static str {
    match code {
        "mismatch" => "The new password and its confirmation differ.",
        "weak" => "Choose at least 12 characters, other than your user name.",
        "same" => "Choose a password different from the current one.",
        "current" => "The current password is wrong.",
        "limited" => "Too many attempts. Wait a minute and try again.",
        "unavailable" => "The user store is not answering. Try again shortly.",
        _ => "The password was not changed. Try again.",
    }
}

#[component]
pub fn SignInPage() -> impl IntoView {
    let query = use_query_map();
    let error = move || query.with(|q| q.get("error"));
    let next = move || query.with(|q| q.get("next")).unwrap_or_else(|| "/".into());
    let signed_out = move || query.with(|q| q.get("signed_out").is_some());
    view! {
        <Title text="Sign in"/>
        <section class="panel auth-panel">
            <h1>"Sign in"</h1>
            {move || error().map(|code| view! {
                <p class="form-error" role="alert">{sign_in_message(&code)}</p>
            })}
            {move || (signed_out() && error().is_none()).then(|| view! {
                <p class="form-note">"You are signed out."</p>
            })}
            <form method="post" action="/auth/sign-in" class="stack" id="sign-in-form">
                <input type="hidden" name="next" value=next/>
                <label>
                    "User name"
                    <input type="text" name="username" autocomplete="username" required autofocus/>
                </label>
                <label>
                    "Password"
                    <input type="password" name="password" autocomplete="current-password" required/>
                </label>
                <button type="submit" class="button primary">"Sign in"</button>
            </form>
        </section>
    }
}

#[component]
pub fn ChangePasswordPage() -> impl IntoView {
    let query = use_query_map();
    let error = move || query.with(|q| q.get("error"));
    view! {
        <Title text="Change password"/>
        <section class="panel auth-panel">
            <h1>"Choose a new password"</h1>
            <p class="form-note">
                "A password someone else set (a one-time or reset password) must be replaced "
                "before you continue. At least 12 characters."
            </p>
            {move || error().map(|code| view! {
                <p class="form-error" role="alert">{password_message(&code)}</p>
            })}
            <form method="post" action="/auth/password" class="stack" id="password-form">
                <label>
                    "Current password"
                    <input type="password" name="current" autocomplete="current-password" required/>
                </label>
                <label>
                    "New password"
                    <input type="password" name="new" autocomplete="new-password" minlength="12" required/>
                </label>
                <label>
                    "New password again"
                    <input type="password" name="confirm" autocomplete="new-password" minlength="12" required/>
                </label>
                <button type="submit" class="button primary">"Change password"</button>
            </form>
        </section>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_code_the_server_sends_has_its_own_message() {
        let generic = sign_in_message("?");
        for code in ["invalid", "limited", "unavailable"] {
            assert_ne!(sign_in_message(code), generic, "{code}");
        }
        let generic = password_message("?");
        for code in [
            "mismatch",
            "weak",
            "same",
            "current",
            "limited",
            "unavailable",
        ] {
            assert_ne!(password_message(code), generic, "{code}");
        }
    }
}
