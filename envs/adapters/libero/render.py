"""Rendering a LIBERO scene with the env's own EGL context, made current only while it draws.

robosuite 1.4's ``MjRenderContext.render`` never makes its context current, so with several envs in
one process each drew into whichever context was current last (another env's scene, or garbage
rows). Here every draw makes the env's context current and releases it afterwards, as the built-in
tasks' renderer does: the thread that builds an env need not be the one that steps it (Ray runs a
worker's constructor and its methods on threads of its own), and an EGL context is current on one
thread at a time.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from embodied.envs.adapters.libero.suites import import_guarded


def render_cameras(ctx: Any, camera_ids: list[int], size: int, one_pass: bool = False) -> list[np.ndarray]:
    """Upright uint8 [size, size, 3] frames of ``camera_ids`` from robosuite's render context ``ctx``."""
    ctx.gl_ctx.make_current()
    try:
        if one_pass:
            frames = render_one_pass(ctx, camera_ids, size)
        else:
            frames = []
            for camera_id in camera_ids:
                ctx.render(width=size, height=size, camera_id=camera_id)
                frames.append(ctx.read_pixels(size, size))
    finally:
        release_gl()
    return [np.ascontiguousarray(f[::-1, ::-1]) for f in frames]  # LIBERO's cameras come upside down


def render_one_pass(ctx: Any, camera_ids: list[int], size: int) -> list[np.ndarray]:
    """Frames of several cameras in one pass over robosuite's render context (its GL context current):
    each camera draws into its own strip of the buffer and one read fetches them all (a read waits for
    the renderer to finish). Rows come bottom-up, as robosuite's do."""
    import mujoco

    width = size * len(camera_ids)
    if width > ctx.con.offWidth or size > ctx.con.offHeight:
        ctx.update_offscreen_size(max(width, ctx.con.offWidth), max(size, ctx.con.offHeight))
    model, data = ctx.model._model, ctx.data._data
    ctx.cam.type = mujoco.mjtCamera.mjCAMERA_FIXED
    for i, camera_id in enumerate(camera_ids):
        ctx.cam.fixedcamid = camera_id
        # The whole scene update per camera (cheap next to the draw): moving only the camera and its
        # headlight, as the built-in tasks do, left the wrist frame 1 level off robosuite's here.
        mujoco.mjv_updateScene(model, data, ctx.vopt, ctx.pert, ctx.cam, mujoco.mjtCatBit.mjCAT_ALL, ctx.scn)
        mujoco.mjr_render(mujoco.MjrRect(i * size, 0, size, size), ctx.scn, ctx.con)
    pixels = np.empty((size, width, 3), dtype=np.uint8)
    mujoco.mjr_readPixels(pixels, None, mujoco.MjrRect(0, 0, width, size), ctx.con)
    return [pixels[:, i * size:(i + 1) * size] for i in range(len(camera_ids))]


def release_gl() -> None:
    """Leave no EGL context current on this thread."""
    egl = egl_module()
    if egl is not None and egl.EGL_DISPLAY is not None:
        egl.EGL.eglMakeCurrent(egl.EGL_DISPLAY, egl.EGL.EGL_NO_SURFACE, egl.EGL.EGL_NO_SURFACE, egl.EGL.EGL_NO_CONTEXT)


def gl_strings(ctx: Any) -> dict[str, str | None]:
    """The GL vendor, renderer and version strings of ``ctx`` (None each without a context)."""
    if ctx is None:
        return {"vendor": None, "renderer": None, "version": None}
    from OpenGL import GL

    ctx.gl_ctx.make_current()
    try:
        return {k: (GL.glGetString(v) or b"").decode() for k, v in
                (("vendor", GL.GL_VENDOR), ("renderer", GL.GL_RENDERER), ("version", GL.GL_VERSION))}
    finally:
        release_gl()


@functools.cache  # looked up once: release_gl runs after every frame
def egl_module() -> Any:
    """robosuite's EGL context module when it renders with EGL, else None."""
    try:
        return import_guarded("robosuite.renderers.context.egl_context", "robosuite")
    except Exception:  # noqa: BLE001 - another GL backend: nothing to release
        return None
