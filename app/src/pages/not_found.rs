use crate::components::ErrorPanel;
use crate::error::AppError;
use leptos::prelude::*;
use leptos_meta::Title;

#[component]
pub fn NotFound() -> impl IntoView {
    view! {
        <Title text="Not found"/>
        <ErrorPanel error=AppError::NotFound/>
    }
}
