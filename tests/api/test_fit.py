"""The fit answer over HTTP, for a UI's model popup, on real-size sparse files."""

from __future__ import annotations

from ..models._sparse import write_all


def test_fit_answers_for_files_in_the_models_dir(client, server):
    write_all(server.data_dir / "models")
    models = [
        "diffusion_models/z_image_turbo_bf16.safetensors",
        "text_encoders/qwen_3_4b.safetensors",
        "vae/ae.safetensors",
    ]
    r = client.get("/v1/fit", params={"model": models, "vramGb": 12, "ramGb": 32})
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["fits"] is True
    plans = {c["role"]: c["plan"] for c in answer["components"]}
    assert plans["diffusion"] == {
        "device": "cuda",
        "dtype": "bf16",
        "quantization": "int8",
        "offload": "resident",
    }
    assert answer["components"][0]["params"] == 6_154_908_736
    small = client.get("/v1/fit", params={"model": models, "vramGb": 2, "ramGb": 4}).json()
    assert small["fits"] is False and small["reason"].startswith("Won't fit")
    r = client.get("/v1/fit", params={"model": "vae/../../etc/passwd"})
    assert r.status_code in (404, 422)
    assert client.get("/v1/fit", params={"model": "vae/none.safetensors"}).status_code == 404
