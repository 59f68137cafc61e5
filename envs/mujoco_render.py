"""Offscreen rendering of a MuJoCo model: one GL context per env for all its cameras and image sizes."""

from __future__ import annotations

import atexit
from typing import Any

import mujoco
import numpy as np


class OffscreenRenderer:
    """One GL context for all the cameras and image sizes an env needs.

    ``mujoco.Renderer`` is tied to a single image size; an env needs two (training images and
    video frames), and a second renderer would mean a second GL context per env. This renders
    into a ``size x size`` corner of one offscreen buffer instead, which gives the same pixels,
    and draws all the cameras of an observation side by side in one pass.
    """

    def __init__(self, model: mujoco.MjModel, max_size: int, max_width: int = 0) -> None:
        # The offscreen buffer must hold the largest frame, and ``max_width`` for the frames of one
        # pass side by side; the model's default is 640x480.
        model.vis.global_.offwidth = max(model.vis.global_.offwidth, max_size, max_width)
        model.vis.global_.offheight = max(model.vis.global_.offheight, max_size)
        self._model = model
        self._gl: Any = mujoco.GLContext(max_size, max_size)
        # Registered after the eglTerminate that mujoco.egl registers with its first context, so
        # (atexit being LIFO) it runs before it: freeing after terminate raises EGL errors.
        atexit.register(self.close)
        self._gl.make_current()
        self._context: mujoco.MjrContext | None = mujoco.MjrContext(model, mujoco.mjtFontScale.mjFONTSCALE_100)
        mujoco.mjr_setBuffer(mujoco.mjtFramebuffer.mjFB_OFFSCREEN, self._context)
        self.scene = mujoco.MjvScene(model, maxgeom=max(100, 2 * model.ngeom))
        self._option = mujoco.MjvOption()
        self._camera = mujoco.MjvCamera()
        self._camera.type = mujoco.mjtCamera.mjCAMERA_FIXED
        self._release()

    def _release(self) -> None:
        """Leave the context current on no thread. An EGL context is current on one thread at a
        time, and the thread that builds or resets an env need not be the one that steps it next
        (Ray runs a worker's constructor and its methods on threads of its own)."""
        if type(self._gl).__module__.startswith("mujoco.egl"):
            from mujoco import egl

            egl.EGL.eglMakeCurrent(egl.EGL_DISPLAY, egl.EGL.EGL_NO_SURFACE, egl.EGL.EGL_NO_SURFACE,
                                   egl.EGL.EGL_NO_CONTEXT)

    def render(self, data: mujoco.MjData, camera_id: int, size: int, cheap: bool) -> np.ndarray:
        """uint8 [size, size, 3] from camera ``camera_id``; ``cheap`` turns shadows and reflections off."""
        return self.render_cameras(data, (camera_id,), size, cheap)[0]

    def render_cameras(self, data: mujoco.MjData, camera_ids: tuple[int, ...], size: int,
                       cheap: bool) -> list[np.ndarray]:
        """One uint8 [size, size, 3] frame per camera, in one pass: the scene is built once, each
        camera draws into its own ``size``-wide strip of the buffer, and one read fetches them all
        (a read waits for the GPU or llvmpipe to finish, so one per env step rather than one per
        camera)."""
        if self._context is None:
            raise RuntimeError("render() called after close()")
        if size * len(camera_ids) > self._context.offWidth or size > self._context.offHeight:
            raise ValueError(f"{len(camera_ids)} frames of {size}x{size} do not fit the "
                             f"{self._context.offWidth}x{self._context.offHeight} offscreen buffer")
        self._gl.make_current()
        try:
            for i, camera_id in enumerate(camera_ids):
                self._camera.fixedcamid = camera_id
                if i == 0:
                    mujoco.mjv_updateScene(self._model, data, self._option, None, self._camera,
                                           mujoco.mjtCatBit.mjCAT_ALL, self.scene)
                    # Set after every update: training cameras never pay for shadow or reflection passes.
                    self.scene.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = not cheap
                    self.scene.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = not cheap
                else:  # the geoms do not depend on the camera: move it (and its headlight) only
                    mujoco.mjv_updateCamera(self._model, data, self._camera, self.scene)
                    mujoco.mjv_makeLights(self._model, data, self.scene)  # the headlight moves with it
                mujoco.mjr_render(mujoco.MjrRect(i * size, 0, size, size), self.scene, self._context)
            pixels = np.empty((size, size * len(camera_ids), 3), dtype=np.uint8)
            mujoco.mjr_readPixels(pixels, None, mujoco.MjrRect(0, 0, size * len(camera_ids), size), self._context)
        finally:
            self._release()
        pixels = pixels[::-1]  # OpenGL rows run bottom-up
        return [np.ascontiguousarray(pixels[:, i * size:(i + 1) * size]) for i in range(len(camera_ids))]

    def close(self) -> None:
        """Free the GL resources now (safe to call twice)."""
        atexit.unregister(self.close)
        if self._context is not None:
            self._gl.make_current()
            self._context.free()
            self._context = None
        if self._gl is not None:
            self._gl.free()
            self._gl = None
